"""The library's verbs, what the CLI calls: capture, import, compare. They wire the drivers, the run store and
the analyses together; rendering is left to the caller."""

from __future__ import annotations

import functools
from pathlib import Path

from roseprof.analysis.diff import METHOD, RunData, compare, gate, kernel_changes, prepare, rank
from roseprof.analysis.summary import analyse
from roseprof.errors import RoseprofError
from roseprof.model import Trace
from roseprof.run import environment, pipeline, tables
from roseprof.run.store import Run, RunStore
from roseprof.workload.roseinfer import default_command
from roseprof.workload.steplog import read_steplog


def analyse_trace(
    trace: Trace, steplog: Path | None, label: str = "the step log", strict: bool = False
) -> tuple[dict, dict]:
    """A trace and, where the engine wrote one, its step log -> (summary, tables).

    A damaged step log costs only its damaged lines (warnings in the summary); with `strict` (a log the user
    named) one in which no line is a step-log record is refused in one line naming `label`."""
    log = read_steplog(str(steplog)) if steplog is not None else None
    if strict and log is not None and log.records == 0:
        raise RoseprofError(
            f"{label}: not a roseinfer step log (none of its {log.lines} line(s) is a record)"
        )
    summary, data = analyse(trace, log)
    if log is not None:
        summary["warnings"].extend(log.warnings(label))
    return summary, data


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


def import_path(store: RunStore, path: str, name: str | None, steplog: str | None) -> Run:
    """`roseprof import`: any file a driver reads (picked by suffix, then content), into a new run."""
    analyse_import = functools.partial(analyse_trace, label=steplog or "the step log", strict=True)
    return pipeline.import_file(store, path, name, steplog, analyse_import)


def load_run(run: Run) -> RunData:
    return prepare(
        run.summary(), tables.read_steps(run.path), tables.read_itl(run.path), tables.read_trace(run.path)
    )


def _check(run: Run, allow_incomplete: bool) -> None:
    status = run.manifest.get("status")
    if status == "damaged":
        raise RoseprofError(f"run {run.id} is damaged ({run.manifest.get('damaged')}): nothing to compare")
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
