"""The library's verbs, what the CLI calls: capture, import, compare. They wire the drivers, the run store and
the analyses together; rendering is left to the caller."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import numpy as np

from roseprof.analysis import noise_floor
from roseprof.analysis.diff import compare, floor_for, gate, kernel_changes, method, rank
from roseprof.analysis.samples import RunData, prepare
from roseprof.analysis.summary import analyse
from roseprof.analysis.verdict import verdict
from roseprof.capture import environment, pipeline
from roseprof.errors import RoseprofError
from roseprof.model import Trace
from roseprof.render.view import DiffView, RunView
from roseprof.run import alike, baselines, tables
from roseprof.run.store import Run, RunStore
from roseprof.workload.roseinfer import default_command, ncu_default_command
from roseprof.workload.steplog import rank_log_paths, rank_path, read_steplog


def analyse_trace(
    trace: Trace,
    steplog: Path | None,
    label: str = "the step log",
    strict: bool = False,
    step_range: str | None = None,
) -> tuple[dict, dict]:
    """A trace and, where the engine wrote one, its step log -> (summary, tables).

    A damaged step log costs only its damaged lines (warnings in the summary); with `strict` (a log the user
    named) one in which no line is a step-log record is refused in one line naming `label`."""
    log = read_steplog(str(steplog)) if steplog is not None else None
    if strict and log is not None and log.records == 0:
        raise RoseprofError(
            f"{label}: not a roseinfer step log (none of its {log.lines} line(s) is a record)"
        )
    # The other ranks' logs beside rank 0's (steplog.rank<r>.jsonl); a damaged one costs its lines, as rank 0's,
    # and one with no record at all is refused as rank 0's is (strict), or said (a capture's).
    rank_logs, unusable = {}, []
    if steplog is not None:
        for rank, path in rank_log_paths(str(steplog)).items():
            other = read_steplog(path) if rank else None
            # A user's file is named as the user has it (label is their --steplog: rank_path names its ranks').
            other_label = rank_path(label, rank) if strict else f"{label} (rank {rank})"
            if other is not None and other.records:
                rank_logs[rank] = (other, other_label)
            elif other is not None:
                words = f"not a roseinfer step log (none of its {other.lines} line(s) is a record)"
                if strict:
                    raise RoseprofError(f"{other_label}: {words}")
                unusable.append(f"{other_label}: {words}: rank {rank}'s steps are not joined to a log")
    summary, data = analyse(trace, log, step_range, {r: lg for r, (lg, _) in rank_logs.items()})
    if log is not None:
        summary["warnings"].extend(log.warnings(label))
    for other, other_label in rank_logs.values():
        summary["warnings"].extend(other.warnings(other_label))
    summary["warnings"].extend(unusable)
    return summary, data


def register_sections() -> None:
    """Hand run/checks.py every analysis section's checks (run/ never imports analysis/), so that a stored
    summary.json is checked part by part wherever it is read. Importing the analyses does it once; calling this
    again hands over the sections added to SECTIONS since."""
    from roseprof.analysis.sections import register_checks

    register_checks()


def section_panels(summary: dict) -> list[dict]:
    """The panels of the analysis sections that offer them (analysis/sections/), from a run's summary alone."""
    from roseprof.analysis.sections import SECTIONS

    return [p for s in SECTIONS if s.panels is not None for p in s.panels(summary)]


def capture(
    store: RunStore,
    options,
    cmd: list[str] | None,
    name: str | None,
    repeat: int = 1,
    progress: pipeline.Progress | None = None,
    step_range: str | None = None,
) -> list[pipeline.CaptureOutcome]:
    """`roseprof nsys|ncu|torch`: CMD (or the built-in engine benchmark) under the tool of `options` (a driver's
    options: NsysOptions, NcuOptions, TorchOptions), into a new run; `repeat` times: that many runs of one name,
    stopping at the first that does not complete."""
    from roseprof.drivers import capturer

    gpus = environment.gpus()
    tool = options.tool
    run_name = name or default_name(tool, cmd)  # the command the user gave, not one taken from --from's run
    manifest = _step_manifest(step_range)
    default = default_command
    if tool == "ncu":
        options, cmd = _ncu_from(store, options, cmd)
        default, manifest = ncu_default_command, {}
    capture_one = capturer(options, has_gpu=bool(gpus))
    command = list(cmd) if cmd else default()
    analyser = _analyser(step_range)
    return pipeline.capture_series(
        lambda extra: pipeline.capture(
            store, capture_one, command, run_name, gpus, analyser, progress, {**extra, **manifest}
        ),
        repeat,
    )


def default_name(tool: str, cmd: list[str] | None) -> str:
    """A capture's run name when --name is not given: the tool, then `demo` (the built-in benchmark) or the
    command's name. The tool is in it because a name is a group in `diff`: `roseprof torch` and `roseprof nsys`
    of one command must not pool into one side."""
    return f"{tool}-{Path(cmd[0]).name if cmd else 'demo'}"


def previous_run(store: RunStore, run: Run) -> Run | None:
    """The latest complete run with the same name before `run`: what a user compares a new capture with."""
    earlier = [
        r
        for r in store.runs()
        if r.id != run.id
        and r.manifest.get("name") == run.manifest.get("name")
        and r.manifest.get("status") == "complete"
        and r.manifest.get("created_utc", "") <= run.manifest.get("created_utc", "")
    ]
    return earlier[-1] if earlier else None


def _ncu_from(store: RunStore, options, cmd: list[str] | None) -> tuple[object, list[str] | None]:
    """ncu's options with --from resolved (the `top` kernels by GPU time of that nsys or torch run,
    FROM_LAUNCHES_PER_KERNEL launches each at most, and its command when none is given) and defaults filled."""
    from roseprof.analysis.ncu import kernel_regex, top_kernels
    from roseprof.drivers.ncu.options import FROM_LAUNCHES_PER_KERNEL

    if options.from_run is not None:
        if options.kernel:
            raise RoseprofError("--from picks the kernels itself: give --from or --kernel, not both")
        source = store.resolve(options.from_run)
        if (source.manifest.get("tool") or {}).get("name") == "ncu":
            raise RoseprofError(f"run {source.id} is an ncu run: --from takes an nsys or torch run")
        chosen = top_kernels(source.summary(), options.top)
        if not chosen:
            raise RoseprofError(
                f"run {source.id} has no kernels to profile (--from needs a run with GPU kernels)"
            )
        launches = options.launch_count
        if launches is None:
            launches = sum(min(c, FROM_LAUNCHES_PER_KERNEL) for _, c in chosen)
        # The exact demangled names nsys and torch record, matched whole.
        options = dataclasses.replace(
            options,
            kernel=kernel_regex([n for n, _ in chosen]),
            kernel_name_base="demangled",
            launch_count=launches,
            from_run=source.id,
        )
        if not cmd:
            cmd = source.manifest.get("command")
            if not cmd:
                raise RoseprofError(
                    f"run {source.id} has no command (it was imported): give the command after --"
                )
    return options.with_defaults(), cmd


def _analyser(step_range: str | None, **kw):
    """The analysis step of a capture or import: with --step-range, that range is the program's step."""
    return (
        functools.partial(analyse_trace, step_range=step_range, **kw) if step_range or kw else analyse_trace
    )


def _step_manifest(step_range: str | None) -> dict:
    return {"step_range": step_range} if step_range else {}


def export_chrome(store: RunStore, ref: str, out: str | None) -> Path:
    """`roseprof export --format chrome`: a stored run as Chrome trace-event JSON (Perfetto opens it)."""
    from roseprof.export.chrome import ChromeExport

    run = store.resolve(ref)
    if not tables.has_trace(run.path):
        raise RoseprofError(
            f"run {run.id} has no stored trace (status {run.manifest.get('status')}): nothing to export"
        )
    path = Path(out) if out else run.path / "trace.chrome.json.gz"
    # The export reads the stored trace, steps and telemetry, never summary.json: a run whose summary is damaged
    # still exports.
    return ChromeExport().render(RunView(run, summary=None), path)


def import_path(
    store: RunStore,
    path: str | list[str],
    name: str | None,
    steplog: str | None,
    step_range: str | None = None,
) -> Run:
    """`roseprof import`: any file a driver reads (picked by suffix, then content), into a new run; several files,
    or a folder of them (HTA's layout, rank-N.*.json[.gz]), as one run of several ranks (Kineto)."""
    analyse_import = _analyser(step_range, label=steplog or "the step log", strict=True)
    from roseprof.drivers import pick_reader, rank_files

    paths = [path] if isinstance(path, str) else list(path)
    files: list[str] = []
    for p in paths:
        files += [str(f) for f in rank_files(Path(p), p)] if Path(p).is_dir() else [p]
    return pipeline.import_file(
        store, files[0] if len(files) == 1 else files, name, steplog, analyse_import, pick_reader,
        _step_manifest(step_range),
    )  # fmt: skip


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
    if not tables.has_summary(run.path):
        raise RoseprofError(f"run {run.id} is {status} and has no {tables.SUMMARY}: nothing to compare")
    tables.check_stored_run(run.path, run.manifest)


def _describe(runs: list[Run], mixed: str | None = None) -> dict:
    """One side of a diff: its latest run's name, tool and command, every run's id, and what a side pooled with
    --pool-mixed mixes."""
    m = runs[-1].manifest
    out = {
        "id": runs[-1].id,
        "name": m.get("name"),
        "tool": m.get("tool"),
        "status": m.get("status"),
        "command": m.get("command"),
        "runs": [r.id for r in runs],
    }
    if mixed:
        out["mixed"] = mixed
    return out


def resolve_side(store: RunStore, refs: list[str], latest: bool) -> list[Run]:
    """Run references -> runs, oldest first, each once: a name stands for all its complete runs unless latest."""
    found: dict[str, Run] = {}
    for ref in refs:
        for run in store.resolve_group(ref, latest):
            found.setdefault(run.id, run)
    return sorted(found.values(), key=lambda r: (r.manifest.get("created_utc", ""), r.id))


def set_baseline(store: RunStore, name: str, refs: list[str], latest: bool) -> tuple[dict, list[Run]]:
    """`roseprof baseline set`: the runs the references stand for, kept under a name."""
    runs = resolve_side(store, refs, latest)
    return baselines.set_baseline(store, name, runs), runs


def diff_runs(
    store: RunStore,
    refs_a: list[str],
    refs_b: list[str],
    threshold,
    patterns,
    allow_incomplete: bool,
    latest: bool = False,
    baseline: str | None = None,
    min_effect: float | None = None,
    pool_mixed: bool = False,
) -> DiffView:
    """`roseprof diff`: group A (the refs, or a named baseline) against group B, as the view every diff renderer
    takes: the result (what --json prints), the sides' pooled samples (the diff dashboard's distributions) and
    both sides' runs. A side pools only alike runs (run/alike.py) unless pool_mixed; min_effect replaces the
    calibrated noise floors."""
    runs_a = baselines.baseline_runs(store, baseline) if baseline else resolve_side(store, refs_a, latest)
    runs_b = resolve_side(store, refs_b, latest)
    alike.check_not_self(runs_a, runs_b)
    mixed_a = alike.check_side("before", refs_a, runs_a, pool_mixed)
    mixed_b = alike.check_side("after", refs_b, runs_b, pool_mixed)
    for run in runs_a + runs_b:
        _check(run, allow_incomplete)
    a, b = [load_run(r) for r in runs_a], [load_run(r) for r in runs_b]
    floor = floor_for(a, b, min_effect)
    metrics, method_text = compare(a, b, floor=floor), method(len(a), len(b), floor)
    ncu_sides = [all(d.summary.get("ncu") for d in g) for g in (a, b)]
    both_ncu = all(ncu_sides)
    if any(ncu_sides) and (len(a) > 1 or len(b) > 1):
        raise RoseprofError("ncu runs are compared one a side: give one run each (or --latest)")
    if both_ncu:
        from roseprof.analysis import ncu_diff

        # Per-launch metrics instead of kernel-time totals (which count the launches the filters chose).
        metrics = [m for m in metrics if not m["name"].startswith("kernels.")]
        ncu_metrics = ncu_diff.compare(tables.read_trace(runs_a[0].path), tables.read_trace(runs_b[0].path))
        metrics += noise_floor.apply(ncu_metrics, floor)
        method_text = f"{ncu_diff.METHOD}; noise floor: {floor.describe()}"
    changes = kernel_changes(a, b)
    if not metrics and not (both_ncu and (changes["new"] or changes["vanished"])):
        raise RoseprofError(
            f"runs {runs_a[-1].id} and {runs_b[-1].id} have nothing in common to compare "
            "(no shared regions, kernels or steps)"
        )
    regressions = gate(metrics, threshold, patterns)
    side_a, side_b = _describe(runs_a, mixed_a), _describe(runs_b, mixed_b)
    result = {
        "a": side_a,
        "b": side_b,
        "verdict": verdict(
            metrics, side_a, side_b, changes, floor.describe(), noise_floor.ONE_RUN_FALSE_ALARMS[floor.device]
        ),
        "method": method_text,
        "metrics": rank(metrics),
        "kernels": changes,
        "regressions": [m["name"] for m in regressions],
        "threshold_pct": threshold,
    }
    samples = {
        k: {"step_ns": _pooled([d.step_dur for d in g]), "itl_ms": _pooled([d.itl for d in g])}
        for k, g in (("a", a), ("b", b))
    }
    return DiffView(result, samples, runs_a, runs_b)


def _pooled(arrays: list) -> np.ndarray | None:
    return None if any(x is None for x in arrays) else np.concatenate(arrays)
