"""The run folder's normalised files, written and read in this one module.

    summary.json    the contract (DESIGN.md): regions, kernels, steps, itl, requests
    steps.json      per decode step: times, rollovers, batch size, ns per region inside the step; run_starts:
                    where each benchmark run begins (step index, ms since the first arrival); several ranks:
                    `ranks`: {label: each rank's own steps (index, start_ns, dur_ns, rollovers)}
    itl.json        per request: token times, ITL, the step that produced each token
    telemetry.json  GPU samples during a capture (when there was a GPU)
    names.json      the trace's Names table, domains and thread names, and TABLES_VERSION; since version 3 also
                    `processes` (pid, name, rank, world_size, rank_from each) and `thread_pids` (thread id -> pid)
    ranges.npz      the model's Ranges columns
    marks.npz       the model's Marks columns
    gpu_ops.npz     the model's GpuOps columns
    graph_nodes.npz the model's GraphNodes columns (CUDA graph nodes: where replayed kernels were captured)
    op_regions.npz  per GPU op, its innermost launching region and capture-time region (names index, -1: none)
    diff_samples.npz   what each analysis section's diff_prepare made of the run at import, which a diff reads
                    instead of the trace (run/sample_tables.py; absent before 2026-11-28: the diff builds them)
    host_events.npz the model's HostEvents columns (torch: CPU operators, Python frames, calls that launched
                    nothing); absent when there are none (and in runs stored before 2026-11-24)
    load_tokens.json   a load (`roseprof load`, tool `load`): per request every token's arrival (ms after the
                    load's start), id and the server's decode step, with the server's response id
    load_metrics.json  a load: the server's /metrics scraped before, every second during, and after
    kernel_metrics.npz, kernel_metrics.json   per-launch metrics (ncu): numeric columns in the .npz (NaN where
                    the report has no value), enclosing NVTX ranges, rule findings, device facts in the .json

Version 3 (2026-11-24) adds the processes; a run stored before reads with none (an empty `thread_pids` and
`processes`, as ncu's traces have), which every analysis takes as one process.
Version 1 (before the tool-neutral model) had no marks, thread names, style or the ops' device, stream, graph
node and launching call; reading such a run fills those with -1 and says nothing is lost that the analyses need. The .npz files are uncompressed: zlib on 1M-row columns costs seconds.
"""

from __future__ import annotations

import dataclasses
import zipfile
from pathlib import Path

import numpy as np

from roseprof.errors import RoseprofError
from roseprof.model import (
    HOST_CATEGORIES,
    GpuOps,
    GraphNodes,
    HostEvents,
    KernelMetrics,
    Marks,
    Names,
    Process,
    Ranges,
    Tool,
    Trace,
)
from roseprof.run import sample_tables
from roseprof.run.checks import (
    NUM,
    PROCESS,
    Damaged,
    check,
    check_itl,
    check_names,
    check_steps,
    check_summary,
    check_telemetry,
)
from roseprof.run.json_files import read_json, write_json

# The run folder's file names that other modules need, spelled here only (the rest are this module's own).
SUMMARY = "summary.json"
RANGES = "ranges.npz"
GPU_OPS = "gpu_ops.npz"
STEPLOG = (
    "steplog.jsonl"  # where a capture asks the engine to write its step log (an import copies one there)
)
KERNEL_STAMPS = "kernel_stamps.jsonl"  # a fused kernel's stamps (a capture's or --stamps): capture/pipeline
TABLES_VERSION = 3
KERNEL_METRICS_VERSION = 1
RANGE_COLUMNS = ("start", "end", "name", "domain", "tid", "style")
MARK_COLUMNS = ("ts", "name", "tid")


def steplog_path(folder: Path) -> Path:
    """Where a run keeps the engine's step log (a capture asks the engine to write it there; an import copies it)."""
    return folder / STEPLOG


def has_summary(folder: Path) -> bool:
    return (folder / SUMMARY).is_file()


def has_trace(folder: Path) -> bool:
    """Whether the run stored a trace (ranges or GPU ops) to export."""
    return (folder / RANGES).is_file() or (folder / GPU_OPS).is_file()


def write_trace(folder: Path, trace: Trace) -> None:
    """The model's columns and names, enough to rebuild the trace (dashboards, diff, export) later."""
    np.savez(folder / "ranges.npz", **{c: getattr(trace.ranges, c) for c in RANGE_COLUMNS})
    np.savez(folder / "marks.npz", **{c: getattr(trace.marks, c) for c in MARK_COLUMNS})
    np.savez(folder / "gpu_ops.npz", **{c: getattr(trace.ops, c) for c in GpuOps.COLUMNS})
    np.savez(folder / "graph_nodes.npz", **{c: getattr(trace.graph_nodes, c) for c in GraphNodes.COLUMNS})
    if len(trace.host_events):
        np.savez(folder / "host_events.npz", **{c: getattr(trace.host_events, c) for c in HostEvents.COLUMNS})
    write_json(
        folder / "names.json",
        {
            "version": TABLES_VERSION,
            "tool": {"name": trace.tool.name, "version": trace.tool.version, "format": trace.tool.format},
            "names": trace.names.values,
            "domains": trace.domains,
            "threads": {str(t): n for t, n in trace.threads.items()},
            "processes": [dataclasses.asdict(p) for p in trace.processes.values()],
            "thread_pids": {str(t): p for t, p in trace.thread_pids.items()},
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
    meta = _read_checked(folder / "kernel_metrics.json", _is_object)
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


OP_REGION_COLUMNS = ("region", "capture_region")

# The parts of the run folder an analysis table may fill: an analysis section says which of its tables goes where
# (`Section.stores`, {table name: part}); this module alone knows the files they are in.
STEP_ROWS = "steps.rows"  # steps.json `rows`: {column: [S]}
STEP_REGIONS = (
    "steps.regions"  # steps.json `regions`: the regions inside the step, one `region:NAME` column each
)
RUN_STARTS = "steps.run_starts"  # steps.json `run_starts`
RANK_STEPS = "steps.ranks"  # steps.json `ranks`: several ranks' own steps, by the rank's label ("rank 1")
ITL_SERIES = "itl.series"  # itl.json: per request, its token series
OP_REGIONS = "op_regions"  # op_regions.npz: OP_REGION_COLUMNS
# diff_samples.npz (run/sample_tables.py): {"version": builders' version, "sections": {name: samples}}
DIFF_SAMPLES = "diff_samples"
STORED_PARTS = (STEP_ROWS, STEP_REGIONS, RUN_STARTS, RANK_STEPS, ITL_SERIES, OP_REGIONS, DIFF_SAMPLES)


def write_analysis(folder: Path, summary: dict, parts: dict) -> None:
    """summary.json and the analysis tables the run folder keeps, {part: table} (STORED_PARTS; the analysis
    sections say which of their tables fill which part)."""
    unknown = set(parts) - set(STORED_PARTS)
    if unknown:
        raise ValueError(f"no part of a run folder is called {', '.join(sorted(unknown))}")
    op_regions = parts.get(OP_REGIONS)
    if op_regions is not None:
        np.savez(folder / "op_regions.npz", **{c: np.asarray(op_regions[c]) for c in OP_REGION_COLUMNS})
    if parts.get(DIFF_SAMPLES) is not None:
        sample_tables.write(folder, parts[DIFF_SAMPLES]["version"], parts[DIFF_SAMPLES]["sections"])
    write_json(folder / "steps.json", steps_table(parts))
    write_json(folder / "itl.json", parts.get(ITL_SERIES) or [])
    write_json(folder / SUMMARY, summary)


def steps_table(parts: dict) -> dict:
    """steps.json as `write_analysis` writes it from the analysis parts (what read_steps gives back)."""
    steps = {
        "regions": parts.get(STEP_REGIONS) or [],
        "rows": parts.get(STEP_ROWS),
        "run_starts": list(parts.get(RUN_STARTS) or ()),
    }
    if parts.get(RANK_STEPS):
        steps["ranks"] = parts[RANK_STEPS]  # several ranks: each rank's own steps, by its label ("rank 1")
    return steps


def read_op_regions(folder: Path, n_ops: int, n_names: int) -> dict[str, np.ndarray] | None:
    """Per GPU op, the names index of its innermost launching region and, for a graph-replayed kernel, of the
    region its node was captured in (-1: none); None for runs stored without them, or that do not match."""
    if not (folder / "op_regions.npz").is_file():
        return None
    cols = _load_npz(folder / "op_regions.npz", OP_REGION_COLUMNS)
    if any(len(v) != n_ops or (len(v) and (v.min() < -1 or v.max() >= n_names)) for v in cols.values()):
        return None
    return cols


def write_telemetry(folder: Path, interval_s: float, samples: list[dict]) -> None:
    write_json(
        folder / "telemetry.json", {"clock": "monotonic_ns", "interval_s": interval_s, "samples": samples}
    )


def _load_npz(path: Path, columns) -> dict[str, np.ndarray]:
    """Columns of an .npz; a column an older version did not write is all -1."""
    out: dict[str, np.ndarray] = {}
    if not path.is_file():
        return {c: np.zeros(0, dtype=np.int64) for c in columns}
    try:
        with np.load(path, allow_pickle=False) as z:
            present = {k: np.asarray(z[k], dtype=np.int64) for k in z.files if k in columns}
    except (OSError, ValueError, TypeError, EOFError, KeyError, zipfile.BadZipFile) as e:
        raise _damaged(path, f"not a readable .npz ({type(e).__name__})") from None
    lengths = {len(v) for v in present.values()} | set()
    if any(v.ndim != 1 for v in present.values()) or len(lengths) > 1:
        raise _damaged(path, "its columns have different lengths")
    n = lengths.pop() if lengths else 0
    for c in columns:
        out[c] = present[c] if c in present else np.full(n, -1, dtype=np.int64)
    return out


def read_trace(folder: Path) -> Trace:
    """The stored trace, rebuilt as the model (ranges, marks, GPU ops, names); RoseprofError when damaged."""
    meta = _read_checked(folder / "names.json", check_names) or {}
    tool = meta.get("tool") or {}
    version = meta.get("version", 1)
    ranges = _load_npz(folder / "ranges.npz", RANGE_COLUMNS)
    if not (folder / "ranges.npz").is_file() or version < 2:
        ranges["style"] = np.zeros(len(ranges["start"]), dtype=np.int64)
    ops = _load_npz(folder / "gpu_ops.npz", GpuOps.COLUMNS)
    if version < 2 and len(ops["start"]):
        # Version 1 kept api_start and api_tid only; an op with a launching call ended it no later than it began.
        ops["api_end"] = np.where(ops["api_tid"] >= 0, ops["api_start"], -1)
    marks = _load_npz(folder / "marks.npz", MARK_COLUMNS)
    host = _load_npz(folder / "host_events.npz", HostEvents.COLUMNS)
    names = meta.get("names", [])
    domains = meta.get("domains", [""]) or [""]
    # Every index must resolve: a short names table must not turn into an IndexError in a renderer.
    for file, cols, table in (
        ("ranges.npz", ("name",), ranges),
        ("marks.npz", ("name",), marks),
        ("gpu_ops.npz", ("name",), ops),
        ("host_events.npz", ("name",), host),
    ):
        for c in cols:
            if len(table[c]) and (table[c].min() < 0 or table[c].max() >= len(names)):
                raise _damaged(folder / file, f"a {c} does not resolve in names.json")
    if len(ops["api_name"]) and ops["api_name"].max() >= len(names):
        raise _damaged(folder / "gpu_ops.npz", "an api_name does not resolve in names.json")
    if len(host["kind"]) and (host["kind"].min() < 0 or host["kind"].max() >= len(HOST_CATEGORIES)):
        raise _damaged(folder / "host_events.npz", "a kind is not a known host event category")
    if len(ranges["domain"]) and (ranges["domain"].min() < 0 or ranges["domain"].max() >= len(domains)):
        raise _damaged(folder / "ranges.npz", "a domain does not resolve in names.json")
    return Trace(
        tool=Tool(tool.get("name", "?"), tool.get("version", "?"), tool.get("format")),
        names=Names(names),
        domains=domains,
        ranges=Ranges(**ranges),
        marks=Marks(**marks),
        ops=GpuOps(**ops),
        graph_nodes=GraphNodes(**_load_npz(folder / "graph_nodes.npz", GraphNodes.COLUMNS)),
        threads={int(t): n for t, n in (meta.get("threads") or {}).items() if t.lstrip("-").isdigit()},
        kernel_metrics=read_kernel_metrics(folder),
        host_events=HostEvents(**host),
        thread_pids={
            int(t): p for t, p in (meta.get("thread_pids") or {}).items() if t.lstrip("-").isdigit()
        },
        processes={
            p["pid"]: Process(**{k: p[k] for k in PROCESS if k in p}) for p in meta.get("processes") or []
        },
    )


def _damaged(path: Path, why: str) -> RoseprofError:
    return RoseprofError(
        f"run {path.parent.name} is damaged: {path.name}: {why} (re-import its raw/ file, or delete the folder)"
    )


def _read_checked(path: Path, checker):
    """A JSON file of the run, checked for the shape the readers expect; None when absent."""
    if not path.is_file():
        return None
    try:
        value = read_json(path)
    except (
        OSError,
        ValueError,
        RecursionError,
    ) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise _damaged(path, f"not readable JSON ({type(e).__name__})") from None
    try:
        checker(value)
    except Damaged as e:
        raise _damaged(path, str(e)) from None
    return value


def read_summary(folder: Path, section_checks: dict) -> dict | None:
    """summary.json, checked against what is no section's and `section_checks` (the sections' checks of their parts:
    the store hands them in)."""
    return _read_checked(folder / SUMMARY, lambda summary: check_summary(summary, section_checks))


def summary_damage(folder: Path, section_checks: dict) -> str | None:
    """What keeps a run folder's summary.json from being read back (as `read_summary` would refuse it), or None:
    checked before a run is stored as complete, so that no complete run is one every command refuses."""
    try:
        check_summary(read_json(folder / SUMMARY), section_checks)
    except Damaged as e:
        return f"{SUMMARY}: {e}"
    except (OSError, ValueError, RecursionError) as e:
        return f"{SUMMARY}: not readable JSON ({type(e).__name__})"
    return None


def read_steps(folder: Path) -> dict | None:
    """{"regions": [...], "rows": {column: [S]}, "run_starts": [...]} or None (run_starts absent before 2026-11)."""
    return _read_checked(folder / "steps.json", check_steps)


def read_itl(folder: Path) -> list | None:
    return _read_checked(folder / "itl.json", check_itl)


def read_telemetry(folder: Path) -> dict | None:
    return _read_checked(folder / "telemetry.json", check_telemetry)


# What every complete (or incomplete, analysed) run holds: a diff of a run missing one would compare nothing
# there in silence.
RUN_FILES = ("summary.json", "steps.json", "itl.json", "names.json", "ranges.npz", "gpu_ops.npz", "marks.npz")
# A load stores no trace: its summary.json (the `serving` part holds the per-request table) and its tokens.
LOAD_TOOL = "load"
LOAD_TOKENS = "load_tokens.json"
LOAD_METRICS = "load_metrics.json"
LOAD_FILES = (SUMMARY, LOAD_TOKENS)
LOAD_TOKEN_ROW = {"index": int, "t_ms": [NUM], "token_ids": list, "steps": list}


def write_load(folder: Path, summary: dict, tokens: list, metrics: list | None) -> None:
    """A load's files: summary.json, its per-token table and, where the server had /metrics, the scrapes."""
    write_json(folder / LOAD_TOKENS, tokens)
    if metrics:
        write_json(folder / LOAD_METRICS, metrics)
    write_json(folder / SUMMARY, summary)


def _check_load_tokens(rows) -> None:
    check(rows, [LOAD_TOKEN_ROW])
    for i, row in enumerate(rows):
        if not len(row["t_ms"]) == len(row["token_ids"]) == len(row["steps"]):
            raise Damaged(f"[{i}]: t_ms, token_ids and steps have different lengths")


def read_load_tokens(folder: Path) -> list | None:
    """A load's per-token table (None where the run is no load)."""
    return _read_checked(folder / LOAD_TOKENS, _check_load_tokens)


def read_load_metrics(folder: Path) -> list | None:
    return _read_checked(folder / LOAD_METRICS, lambda rows: check(rows, [{"t_ms": NUM, "samples": dict}]))


def is_load(manifest: dict) -> bool:
    return (manifest.get("tool") or {}).get("name") == LOAD_TOOL


def check_stored_run(folder: Path, manifest: dict) -> None:
    """RoseprofError naming the file when an analysed run lacks one of its files or its manifest names another
    tool than the one whose trace it stores."""
    for name in LOAD_FILES if is_load(manifest) else RUN_FILES:
        if not (folder / name).is_file():
            raise _damaged(folder / name, "missing")
    meta = _read_checked(folder / "names.json", check_names) or {}
    stored = (meta.get("tool") or {}).get("name")
    said = (manifest.get("tool") or {}).get("name")
    if stored and said and stored != said:
        raise _damaged(folder / "manifest.json", f"names the tool {said!r}; the stored trace is {stored!r}'s")


def _is_object(value) -> None:
    if not isinstance(value, dict):
        raise Damaged("not a JSON object")
