"""Nsight Compute runs: the summary's kernel table from per-launch metrics, and its `ncu` section (launches,
per-kernel means, rule findings, the GPU's peaks and each launch's place on the roofline).

A launch's region is the innermost NVTX push/pop range that enclosed it (ncu records the range stack of the
launching thread), so `kernels[].region` means what it means for nsys runs. Metrics ncu did not collect stay
None in JSON (NaN in the tables), never 0.
"""

from __future__ import annotations

import math

import numpy as np

from roseprof.analysis.gpu_peaks import known_peaks
from roseprof.analysis.stats import group_percentiles
from roseprof.model import KERNEL_METRICS, KernelMetrics, Trace

NOTE = (
    "Nsight Compute replays each kernel alone (serialised, caches flushed between replays by default): durations "
    "are per launch, not timeline times; kernel start times in this run are synthetic (launches end to end)"
)
FLOP_KEYS = ("fp32_flop_per_s", "fp16_flop_per_s", "fp64_flop_per_s", "tensor_flop_per_s")
PEAK_KEYS = (
    "peak_dram_bytes_per_s",
    "peak_fp32_flop_per_s",
    "peak_fp16_flop_per_s",
    "peak_fp64_flop_per_s",
    "peak_tensor_flop_per_s",
)


def _num(x) -> float | None:
    """A JSON number, or None for NaN (missing)."""
    x = float(x)
    return None if math.isnan(x) else x


def regions(km: KernelMetrics) -> list[str | None]:
    """[K] the innermost enclosing push/pop range of each launch (None outside any)."""
    return [stack[-1][1] if stack else None for stack in km.nvtx]


def kernel_names(trace: Trace) -> list[str]:
    km = trace.kernel_metrics
    return [trace.names[i] for i in trace.ops.name[km.op]]


def kernels(trace: Trace) -> list[dict]:
    """summary.json's `kernels` for an ncu run: {name, count, total_ns, p50_ns, region} per (kernel, region)."""
    km = trace.kernel_metrics
    names, where = kernel_names(trace), regions(km)
    dur = (trace.ops.end - trace.ops.start)[km.op]
    keys = sorted(set(zip(names, where)), key=lambda k: (k[0], k[1] or ""))
    index = {k: i for i, k in enumerate(keys)}
    group = np.array([index[k] for k in zip(names, where)], dtype=np.int64)
    pct = group_percentiles(group, dur, qs=(50,))
    out = []
    for i, (name, region) in enumerate(keys):
        sel = group == i
        out.append(
            {
                "name": name,
                "count": int(sel.sum()),
                "total_ns": int(dur[sel].sum()),
                "p50_ns": pct[i][0],
                "region": region,
            }
        )
    return sorted(out, key=lambda k: -k["total_ns"])


def _devices(km: KernelMetrics, gpus: list[dict], used: set[int]) -> dict[int, dict]:
    """Each device's facts and peaks: from the report where it has them, else from the known-GPU table (by the
    name the report, or the capture's NVML record, gives)."""
    out = {}
    names = {g.get("index"): g.get("name") for g in gpus}
    for d in sorted(set(km.devices) | used):
        dev = dict(km.devices.get(d) or {"id": d})
        dev.setdefault("name", names.get(d))
        sources = {k: "report" for k in PEAK_KEYS if dev.get(k) is not None}
        table = known_peaks(dev.get("name"))
        if table is not None:
            for k in PEAK_KEYS:
                if dev.get(k) is None and table.get(k) is not None:
                    dev[k] = table[k]
                    sources[k] = f"table ({table['table_name']} datasheet)"
        for k in PEAK_KEYS:
            dev.setdefault(k, None)
        dev["peak_sources"] = sources
        out[d] = dev
    return out


def _launch_rows(trace: Trace, devices: dict[int, dict]) -> list[dict]:
    km = trace.kernel_metrics
    names, where = kernel_names(trace), regions(km)
    device = trace.ops.device[km.op]
    rows = []
    for i in range(len(km)):
        row = {
            "id": int(km.launch_id[i]),
            "kernel": names[i],
            "region": where[i],
            "nvtx": [f"{d}:{n}" if d else n for d, n in km.nvtx[i]],
            "device": int(device[i]),
            "grid": km.grid[i].tolist(),
            "block": km.block[i].tolist(),
        }
        for key in KERNEL_METRICS:
            row[key] = _num(km.value(key)[i])
        rates = [row[k] for k in FLOP_KEYS if row[k] is not None]
        row["flop_per_s"] = sum(rates) if rates else None
        bw = row["dram_bytes_per_s"]
        row["arithmetic_intensity"] = row["flop_per_s"] / bw if row["flop_per_s"] is not None and bw else None
        peak_bw = (devices.get(int(device[i])) or {}).get("peak_dram_bytes_per_s")
        row["dram_bandwidth_pct_of_peak"] = 100 * bw / peak_bw if bw is not None and peak_bw else None
        rows.append(row)
    return rows


def _per_kernel(launches: list[dict]) -> list[dict]:
    groups: dict[str, list[dict]] = {}
    for row in launches:
        groups.setdefault(row["kernel"], []).append(row)
    out = []
    for name, rows in groups.items():
        entry = {
            "name": name,
            "launches": len(rows),
            "total_ns": sum(r["duration_ns"] for r in rows),
            "regions": sorted({r["region"] for r in rows if r["region"]}),
        }
        for key in (*KERNEL_METRICS, "flop_per_s", "arithmetic_intensity", "dram_bandwidth_pct_of_peak"):
            vals = [r[key] for r in rows if r[key] is not None]
            entry[f"mean_{key}"] = sum(vals) / len(vals) if vals else None
        out.append(entry)
    return sorted(out, key=lambda e: -e["total_ns"])


def _rules(km: KernelMetrics, names: list[str]) -> list[dict]:
    """ncu's findings, one row per (kernel, rule): how many launches raised it, the largest estimated speedup and
    the text ncu wrote for that launch (its numbers differ from launch to launch); the biggest promises first."""
    merged: dict[tuple, dict] = {}
    launches: dict[tuple, set] = {}
    for r in km.rules:
        kernel = names[r["launch"]]
        key = (kernel, r["rule"], r["type"])
        entry = merged.setdefault(
            key,
            {
                "kernel": kernel,
                "rule": r["rule"],
                "type": r["type"],
                "section": r["section"],
                "description": r["description"],
                "speedup_type": r.get("speedup_type"),
                "speedup_pct": None,
                "launches": 0,
            },
        )
        launches.setdefault(key, set()).add(r["launch"])
        entry["launches"] = len(launches[key])
        s = r.get("speedup_pct")
        if s is not None and (entry["speedup_pct"] is None or s > entry["speedup_pct"]):
            entry["speedup_pct"] = s
            entry["description"] = r["description"]
            entry["speedup_type"] = r.get("speedup_type")
    return sorted(merged.values(), key=lambda e: (-(e["speedup_pct"] or -1), e["kernel"], e["rule"]))


def section(trace: Trace) -> dict:
    """summary.json's `ncu` section."""
    km = trace.kernel_metrics
    devices = _devices(km, trace.gpus, {int(d) for d in trace.ops.device[km.op]})
    launches = _launch_rows(trace, devices)
    return {
        "note": NOTE,
        "report": trace.tool.format,
        "devices": [devices[d] for d in sorted(devices)],
        "kernels": _per_kernel(launches),
        "launches": launches,
        "rules": _rules(km, kernel_names(trace)),
    }


def top_kernels(summary: dict, top: int) -> list[tuple[str, int]]:
    """The `top` kernels of a run by GPU time (summed over the regions they ran in): [(name, launches)]."""
    total: dict[str, int] = {}
    count: dict[str, int] = {}
    for k in summary.get("kernels") or []:
        total[k["name"]] = total.get(k["name"], 0) + k["total_ns"]
        count[k["name"]] = count.get(k["name"], 0) + k["count"]
    names = sorted(total, key=lambda n: -total[n])[:top]
    return [(n, count[n]) for n in names]
