"""The library's verbs, what the CLI calls: capture, import, compare. They wire the drivers, the run store and
the analyses together; rendering is left to the caller."""

from __future__ import annotations

from pathlib import Path

from roseprof.analysis.diff import METHOD, RunData, compare, gate, kernel_changes, prepare, rank
from roseprof.analysis.summary import analyse
from roseprof.errors import RoseprofError
from roseprof.model import Trace
from roseprof.run import environment, pipeline, tables
from roseprof.run.store import Run, RunStore
from roseprof.workload.roseinfer import default_command
from roseprof.workload.steplog import read_steplog


def analyse_trace(trace: Trace, steplog: Path | None) -> tuple[dict, dict]:
    """A trace and, where the engine wrote one, its step log -> (summary, tables)."""
    log = read_steplog(str(steplog)) if steplog is not None else None
    return analyse(trace, log)


def capture_nsys(
    store: RunStore,
    cmd: list[str] | None,
    name: str | None,
    trace: str | None,
    capture_range: str,
    nvtx_capture: str | None,
) -> pipeline.CaptureOutcome:
    """`roseprof nsys`: CMD (or the built-in engine benchmark) under Nsight Systems, into a new run."""
    from roseprof.drivers.nsys.capture import NsysCapture

    gpus = environment.gpus()
    capturer = NsysCapture(trace, capture_range, nvtx_capture, has_gpu=bool(gpus))
    command = cmd or default_command()
    run_name = name or ("demo" if not cmd else Path(command[0]).name)
    return pipeline.capture(store, capturer, command, run_name, gpus, analyse_trace)


def capture_torch(
    store: RunStore,
    cmd: list[str] | None,
    name: str | None,
    schedule: tuple[int, int, int],
    with_stack: bool,
    cpu_only: bool,
) -> pipeline.CaptureOutcome:
    """`roseprof torch`: CMD (or the built-in engine benchmark) with torch.profiler on, into a new run."""
    from roseprof.drivers.torch.capture import TorchCapture

    gpus = environment.gpus()
    capturer = TorchCapture(*schedule, with_stack=with_stack, cpu_only=cpu_only)
    command = cmd or default_command()
    run_name = name or ("demo" if not cmd else Path(command[0]).name)
    return pipeline.capture(store, capturer, command, run_name, gpus, analyse_trace)


def export_chrome(store: RunStore, ref: str, out: str | None) -> Path:
    """`roseprof export --format chrome`: a stored run as Chrome trace-event JSON (Perfetto opens it)."""
    from roseprof.export.chrome import write_chrome

    run = store.resolve(ref)
    if not (run.path / "ranges.npz").is_file() and not (run.path / "gpu_ops.npz").is_file():
        raise RoseprofError(
            f"run {run.id} has no stored trace (status {run.manifest.get('status')}): nothing to export"
        )
    path = Path(out) if out else run.path / "trace.chrome.json.gz"
    write_chrome(run.path, path, run.manifest)
    return path


def import_path(store: RunStore, path: str, name: str | None, steplog: str | None) -> Run:
    """`roseprof import`: any file a driver reads (picked by suffix, then content), into a new run."""
    return pipeline.import_file(store, path, name, steplog, analyse_trace)


def load_run(run: Run) -> RunData:
    return prepare(
        run.summary(), tables.read_steps(run.path), tables.read_itl(run.path), tables.read_trace(run.path)
    )


def _check(run: Run, allow_incomplete: bool) -> None:
    status = run.manifest.get("status")
    if status != "complete" and not allow_incomplete:
        raise RoseprofError(f"run {run.id} is {status}: compare what it has with --allow-incomplete")
    if not (run.path / "summary.json").is_file():
        raise RoseprofError(f"run {run.id} is {status} and has no summary.json: nothing to compare")


def _describe(run: Run) -> dict:
    m = run.manifest
    return {
        "id": run.id,
        "name": m.get("name"),
        "tool": m.get("tool"),
        "status": m.get("status"),
        "command": m.get("command"),
    }


def diff_runs(
    store: RunStore, ref_a: str, ref_b: str, threshold, patterns, allow_incomplete: bool
) -> tuple[dict, dict]:
    """`roseprof diff`: (result, samples); result is what --json prints, samples feed the diff dashboard."""
    run_a, run_b = store.resolve(ref_a), store.resolve(ref_b)
    for run in (run_a, run_b):
        _check(run, allow_incomplete)
    a, b = load_run(run_a), load_run(run_b)
    metrics = compare(a, b)
    if not metrics:
        raise RoseprofError(
            f"runs {run_a.id} and {run_b.id} have nothing in common to compare (no shared regions, kernels or steps)"
        )
    regressions = gate(metrics, threshold, patterns)
    result = {
        "a": _describe(run_a),
        "b": _describe(run_b),
        "method": METHOD,
        "metrics": rank(metrics),
        "kernels": kernel_changes(a, b),
        "regressions": [m["name"] for m in regressions],
        "threshold_pct": threshold,
    }
    samples = {k: {"step_ns": d.step_dur, "itl_ms": d.itl} for k, d in (("a", a), ("b", b))}
    return result, samples
