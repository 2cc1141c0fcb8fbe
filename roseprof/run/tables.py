"""The run folder's normalised files, written and read in this one module.

    summary.json    the contract (DESIGN.md): regions, kernels, steps, itl, requests
    steps.json      per decode step: times, rollovers, batch size, ns per region inside the step; and
                    run_starts: where each benchmark run begins (step index, ms since the first arrival)
    itl.json        per request: token times, ITL, the step that produced each token
    telemetry.json  GPU samples during a capture (when there was a GPU)
    names.json      the trace's Names table, domains and thread names, and TABLES_VERSION
    ranges.npz      the model's Ranges columns
    marks.npz       the model's Marks columns
    gpu_ops.npz     the model's GpuOps columns
    graph_nodes.npz the model's GraphNodes columns (CUDA graph nodes: where replayed kernels were captured)
    kernel_metrics.npz, kernel_metrics.json
                    per-launch metrics (ncu): numeric columns in the .npz (NaN where the report has no value),
                    enclosing NVTX ranges, rule findings and device facts in the .json with its own version

Version 1 (before the tool-neutral model) had no marks, thread names, style or the ops' device, stream,
graph node and launching call; reading such a run fills those with -1 and says nothing is lost that the
analyses need. The .npz files are uncompressed: zlib on 1M-row columns costs seconds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from roseprof.model import GpuOps, GraphNodes, KernelMetrics, Marks, Names, Ranges, Tool, Trace
from roseprof.run.store import read_json, write_json

TABLES_VERSION = 2
KERNEL_METRICS_VERSION = 1
RANGE_COLUMNS = ("start", "end", "name", "domain", "tid", "style")
MARK_COLUMNS = ("ts", "name", "tid")


def write_trace(folder: Path, trace: Trace) -> None:
    """The model's columns and names, enough to rebuild the trace (dashboards, diff, export) later."""
    np.savez(folder / "ranges.npz", **{c: getattr(trace.ranges, c) for c in RANGE_COLUMNS})
    np.savez(folder / "marks.npz", **{c: getattr(trace.marks, c) for c in MARK_COLUMNS})
    np.savez(folder / "gpu_ops.npz", **{c: getattr(trace.ops, c) for c in GpuOps.COLUMNS})
    np.savez(folder / "graph_nodes.npz", **{c: getattr(trace.graph_nodes, c) for c in GraphNodes.COLUMNS})
    write_json(
        folder / "names.json",
        {
            "version": TABLES_VERSION,
            "tool": {"name": trace.tool.name, "version": trace.tool.version, "format": trace.tool.format},
            "names": trace.names.values,
            "domains": trace.domains,
            "threads": {str(t): n for t, n in trace.threads.items()},
        },
    )
    if trace.kernel_metrics is not None:
        _write_kernel_metrics(folder, trace.kernel_metrics)


def _write_kernel_metrics(folder: Path, km: KernelMetrics) -> None:
    columns = {"op": km.op, "launch_id": km.launch_id, "grid": km.grid, "block": km.block}
    np.savez(folder / "kernel_metrics.npz", **columns, **{f"value:{k}": v for k, v in km.values.items()})
    write_json(
        folder / "kernel_metrics.json",
        {
            "version": KERNEL_METRICS_VERSION,
            "nvtx": km.nvtx,
            "rules": km.rules,
            "devices": {str(d): v for d, v in km.devices.items()},
        },
    )


def read_kernel_metrics(folder: Path) -> KernelMetrics | None:
    """The per-launch metrics (ncu) of a stored run, or None where the run has none."""
    meta = _read_optional(folder / "kernel_metrics.json")
    if meta is None or not (folder / "kernel_metrics.npz").is_file():
        return None
    with np.load(folder / "kernel_metrics.npz", allow_pickle=False) as z:
        cols = {k: np.asarray(z[k]) for k in z.files}
    return KernelMetrics(
        op=cols["op"].astype(np.int64),
        launch_id=cols["launch_id"].astype(np.int64),
        grid=cols["grid"].astype(np.int64).reshape(-1, 3),
        block=cols["block"].astype(np.int64).reshape(-1, 3),
        values={
            k.removeprefix("value:"): v.astype(np.float64) for k, v in cols.items() if k.startswith("value:")
        },
        nvtx=meta.get("nvtx", []),
        rules=meta.get("rules", []),
        devices={int(d): v for d, v in (meta.get("devices") or {}).items()},
    )


def write_analysis(
    folder: Path, summary: dict, steps: dict | None, step_regions: list, itl: list, run_starts=()
) -> None:
    write_json(
        folder / "steps.json", {"regions": step_regions, "rows": steps, "run_starts": list(run_starts)}
    )
    write_json(folder / "itl.json", itl)
    write_json(folder / "summary.json", summary)


def write_telemetry(folder: Path, interval_s: float, samples: list[dict]) -> None:
    write_json(
        folder / "telemetry.json", {"clock": "monotonic_ns", "interval_s": interval_s, "samples": samples}
    )


def _load_npz(path: Path, columns, n_hint: int | None = None) -> dict[str, np.ndarray]:
    """Columns of an .npz; a column an older version did not write is all -1."""
    out: dict[str, np.ndarray] = {}
    if not path.is_file():
        return {c: np.zeros(0, dtype=np.int64) for c in columns}
    with np.load(path, allow_pickle=False) as z:
        present = {k: np.asarray(z[k], dtype=np.int64) for k in z.files}
    n = len(next(iter(present.values()))) if present else 0
    for c in columns:
        out[c] = present[c] if c in present else np.full(n, -1, dtype=np.int64)
    return out


def read_trace(folder: Path) -> Trace:
    """The stored trace, rebuilt as the model (ranges, marks, GPU ops, names)."""
    meta = _read_optional(folder / "names.json") or {}
    tool = meta.get("tool") or {}
    ranges = _load_npz(folder / "ranges.npz", RANGE_COLUMNS)
    if not (folder / "ranges.npz").is_file() or meta.get("version", 1) < 2:
        ranges["style"] = np.zeros(len(ranges["start"]), dtype=np.int64)
    ops = _load_npz(folder / "gpu_ops.npz", GpuOps.COLUMNS)
    if meta.get("version", 1) < 2 and len(ops["start"]):
        # Version 1 kept api_start and api_tid only; an op with a launching call ended it no later than it began.
        ops["api_end"] = np.where(ops["api_tid"] >= 0, ops["api_start"], -1)
    return Trace(
        tool=Tool(tool.get("name", "?"), tool.get("version", "?"), tool.get("format")),
        names=Names(meta.get("names", [])),
        domains=meta.get("domains", [""]),
        ranges=Ranges(**ranges),
        marks=Marks(**_load_npz(folder / "marks.npz", MARK_COLUMNS)),
        ops=GpuOps(**ops),
        graph_nodes=GraphNodes(**_load_npz(folder / "graph_nodes.npz", GraphNodes.COLUMNS)),
        threads={int(t): n for t, n in (meta.get("threads") or {}).items()},
        kernel_metrics=read_kernel_metrics(folder),
    )


def _read_optional(path: Path):
    return read_json(path) if path.is_file() else None


def read_summary(folder: Path) -> dict | None:
    return _read_optional(folder / "summary.json")


def read_steps(folder: Path) -> dict | None:
    """{"regions": [...], "rows": {column: [S]}, "run_starts": [...]} or None (run_starts absent before 2026-11)."""
    return _read_optional(folder / "steps.json")


def read_itl(folder: Path) -> list | None:
    return _read_optional(folder / "itl.json")


def read_telemetry(folder: Path) -> dict | None:
    return _read_optional(folder / "telemetry.json")
