"""From a capture or a file to a finished run, through any driver: run the tool, read its file into the model,
analyse, store. The status and exit code rules live here once for every tool:

    complete    (exit 0)   the command succeeded and its trace was read
    failed      (exit 1)   the command failed; what the tool wrote is kept and read where possible
    failed      (exit 3)   the profiler itself failed and left nothing to read
    (no run)    (exit 2)   the capture's input was wrong (the tool ran but the options matched nothing)
    incomplete  (exit 130) interrupted (Ctrl-C); kept what was captured
    (no run)    (exit 2)   the program cannot be started, or it ran and the profiler recorded nothing (a program
                           that wrote no torch.profiler trace: the driver raises NothingWritten)

A full disk while the run is written: the run is kept as `failed` with what the tool wrote (or, when even
that cannot be written, its temporary folder is named), in one line, exit 2. How a tool runs (Ctrl-C, the
capture lock, its output): capture/tool.py.

`analyse(trace, steplog_path) -> (summary, parts)` is the analysis step, passed in by the caller so that the
run store does not depend on the analyses (roseprof.api wires them together); parts are the analysis tables the
run folder keeps, by the part of the folder each fills (run/tables.py: STORED_PARTS, e.g. the per-step rows, the
per-request ITL series).

`progress(stage, message)` is told what the capture is doing (stages: capture, export, parse, analyse, store);
the caller presents it (render/progress.py) or passes None. The pipeline never prints.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from roseprof.capture import environment
from roseprof.capture.process import check_command
from roseprof.capture.telemetry import TelemetrySampler
from roseprof.capture.tool import Capturer, run_capture
from roseprof.errors import CaptureFailed, NothingRecorded, NothingWritten, RoseprofError
from roseprof.model import KERNEL, Trace
from roseprof.run import tables
from roseprof.run.store import Run, RunStore
from roseprof.workload import kernel_stamps
from roseprof.workload.roseinfer import DECODE_STEP, KERNEL_STAMPS_ENV, STEP_LOG_ENV
from roseprof.workload.steplog import rank_log_paths, rank_path

if TYPE_CHECKING:
    from roseprof.drivers import Reader
    from roseprof.drivers.base import Limits

Analyse = Callable[[Trace, "Path | None"], tuple[dict, dict]]
Progress = Callable[[str, str], None]  # (stage, message)
PickReader = Callable[[Path, str], "Reader"]  # (file, label) -> its driver's reader, or RoseprofError


class Unreadable(RoseprofError):
    """The analysis gave a summary.json the store would refuse to read back: the run is not stored as complete."""


def _quiet(stage: str, message: str) -> None:
    return None


@dataclass
class CaptureOutcome:
    run: Run
    exit_code: int  # 0 complete; 1 the command failed; 3 the profiler failed; 130 interrupted
    summary: dict | None


def capture(
    store: RunStore,
    capturer: Capturer,
    command: list[str],
    name: str,
    gpus: list[dict],
    analyse: Analyse,
    progress: Progress | None = None,
    manifest: dict | None = None,
) -> CaptureOutcome:
    """One capture into a new run; `manifest` adds fields to its manifest (e.g. its place in a --repeat series)."""
    progress = progress or _quiet
    check_command(command)  # a program that cannot start: one line, before any profiler runs or folder exists
    writer = store.new_run(name, capturer.tool)
    writer.manifest.update(manifest or {})
    env = dict(os.environ)
    env.update(capturer.engine_env())
    env[STEP_LOG_ENV] = str(writer.path / tables.STEPLOG)
    env.pop(KERNEL_STAMPS_ENV, None)  # a fused kernel's stamps, where it has any and the tool wants them
    if capturer.kernel_stamps:
        env[KERNEL_STAMPS_ENV] = str(writer.path / tables.KERNEL_STAMPS)
    described = capturer.describe()
    writer.manifest.update(
        command=command,
        cwd=os.getcwd(),
        environment=environment.describe(env),
        gpus=gpus,
        **{capturer.tool: described},
    )
    if described.get("version"):  # the tool ran: its version is known even if it leaves nothing to read
        writer.manifest["tool"] = {**writer.manifest.get("tool", {}), "version": described["version"]}
    status, exit_code, message, summary = "complete", 0, None, None
    sampler = TelemetrySampler()
    sampling = bool(gpus) and sampler.start()
    progress("capture", f"capturing under {capturer.tool}: {' '.join(command)}")
    try:
        result = run_capture(capturer, command, env, writer.raw)
        rc, interrupted = result.returncode, result.interrupted
    except KeyboardInterrupt:
        rc, interrupted = 130, True
    except CaptureFailed as e:
        run = _finish_or_explain(writer, "failed", 3, str(e))
        raise CaptureFailed(f"{e}; its log is kept in {run.path / 'raw'}") from None
    except OSError as e:  # the traces folder's disk filled up under the profiler (its log, its report)
        writer.abort()
        raise RoseprofError(
            f"{store.root}: could not write the capture ({_os_error(e)}); nothing was stored"
        ) from None
    except BaseException:
        # Nothing ran (interrupted while waiting for another capture) or the user's input was wrong (an ncu
        # filter that matched nothing): no run to keep.
        writer.abort()
        raise
    finally:
        samples = sampler.stop() if sampling else []
    try:
        if samples:
            tables.write_telemetry(writer.path, sampler.interval_s, samples)
        writer.manifest["command_exit_code"] = rc
        if interrupted:
            status, exit_code, message = "incomplete", 130, "interrupted (Ctrl-C); kept what was captured"
        elif rc != 0:
            status, exit_code, message = "failed", 1, f"the command exited with code {rc}"
        try:
            progress("export", f"exporting and reading the {capturer.tool} report")
            trace = capturer.collect(writer.raw)
            kernels = int((trace.ops.kind == KERNEL).sum())
            progress("parse", f"{len(trace.ranges):,} ranges, {kernels:,} GPU kernels")
            if not len(trace.ranges) and not len(trace.ops):
                raise NothingRecorded("the trace holds no ranges and no GPU activity")
            summary = _ingest(writer, trace, writer.path / tables.STEPLOG, analyse, progress)
        except NothingRecorded as e:
            if status == "complete":  # the program ran and recorded nothing: nothing worth a run folder
                writer.abort()
                said = (
                    str(e)  # the driver's words: what the program must do
                    if isinstance(e, NothingWritten)
                    else f"{capturer.tool} recorded no range, mark or GPU op (does the program emit NVTX ranges, "
                    "or run CUDA kernels with -t cuda?)"
                )
                raise NothingRecorded(f"{command[0]}: {said}: nothing to analyse, nothing stored") from None
            if interrupted and isinstance(
                e, NothingWritten
            ):  # the driver's words: what the program had not written
                status, exit_code, message = _failed(status, exit_code, message, writer, e)
            elif (
                interrupted
            ):  # stopped before its first range: the reader's hint (other tables) would mislead
                message = "interrupted (Ctrl-C) before the program recorded any range or GPU kernel; kept what was captured"
            else:  # the story is the command's: it failed before recording anything
                message = f"the command exited with code {rc} before recording any range or GPU kernel"
        except (RoseprofError, KeyboardInterrupt) as e:
            # Nothing to parse: keep the run (with the tool's own log) and say why.
            status, exit_code, message = _failed(status, exit_code, message, writer, e)
        run = _finish_or_explain(writer, status, exit_code, message)
    except OSError as e:  # a full disk while writing the normalised files: keep what the tool wrote
        summary = None
        run = _finish_or_explain(writer, "failed", 2, f"could not write the run: {_os_error(e)}")
        raise RoseprofError(
            f"{run.path}: could not write the run ({_os_error(e)}); kept the raw capture"
        ) from None
    return CaptureOutcome(run, exit_code, summary)


def _failed(status, exit_code, message, writer, e: BaseException) -> tuple[str, int, str]:
    why = f"interrupted while exporting; {_kept(writer)}" if isinstance(e, KeyboardInterrupt) else str(e)
    why = why.replace(str(writer.path), str(writer.final))  # name the run's folder, not its temporary name
    status = "failed" if status == "complete" else status
    message = f"{message}; {why}" if message else why
    exit_code = exit_code or (e.exit_code if isinstance(e, RoseprofError) else 130)
    return status, exit_code, message


def _kept(writer) -> str:
    """What the profiler wrote, kept in raw/, and how to analyse it later (a second Ctrl-C stopped the export)."""
    files = sorted(p for p in writer.raw.iterdir() if p.is_file()) if writer.raw.is_dir() else []
    if not files:
        return "the profiler wrote nothing"
    listed = ", ".join(f"raw/{p.name} ({p.stat().st_size / 1e6:.1f} MB)" for p in files)
    report = next((p for p in files if p.suffix in (".nsys-rep", ".qdrep", ".ncu-rep", ".json", ".gz")), None)
    later = f"; analyse it with: roseprof import {writer.final / 'raw' / report.name}" if report else ""
    return f"kept {listed}{later}"


def _finish_or_explain(writer, status: str, exit_code: int, message: str | None) -> Run:
    """Rename the run into place; when even that fails (a full disk), say where its files are."""
    try:
        return writer.finish(status, exit_code=exit_code, message=message)
    except OSError as e:
        raise RoseprofError(
            f"could not finish the run ({_os_error(e)}); what the profiler wrote is in {writer.raw}"
        ) from None


def _os_error(e: OSError) -> str:
    return f"{e.strerror or type(e).__name__}" + (f": {e.filename}" if e.filename else "")


def _ingest(
    writer,
    trace: Trace,
    steplog: Path | None,
    analyse: Analyse,
    progress: Progress | None = None,
    stamps_label: str | None = None,
) -> dict:
    """Analyse the trace (with its kernels' stamps, where the run folder has them) and write the run's normalised
    files; returns the summary. stamps_label: the user's stamps file (an import's --stamps), refused in one line if
    it holds no launch; None: a capture's own, whose damage is a warning."""
    progress = progress or _quiet
    _attach_stamps(writer, trace, stamps_label)
    steplog = steplog if steplog is not None and steplog.is_file() else None
    # The engine's words only for the engine: another program has regions and kernels, not decode steps and ITL.
    engine = steplog is not None or DECODE_STEP in trace.names.values
    progress("analyse", "analysing: regions, kernels" + (", decode steps, ITL" if engine else ""))
    summary, parts = analyse(trace, steplog)
    progress("store", "storing the run")
    summary["run_id"] = writer.run_id
    summary["tool"] = {"name": trace.tool.name, "version": trace.tool.version, "schema": trace.tool.format}
    writer.manifest["tool"] = summary["tool"]
    if trace.gpus and not writer.manifest.get("gpus"):
        writer.manifest["gpus"] = trace.gpus
    tables.write_trace(writer.path, trace)
    tables.write_analysis(writer.path, summary, parts)
    damage = tables.summary_damage(writer.path, writer.store.summary_checks)
    if damage is not None:  # a run every command would refuse is not stored as complete
        raise Unreadable(
            f"the trace gives a run roseprof cannot read back ({damage}); nothing stored as complete"
        )
    return summary


def _attach_stamps(writer, trace: Trace, label: str | None) -> None:
    """A fused kernel's stamps (the run folder's kernel_stamps.jsonl) as GPU ranges of its launches in `trace`."""
    path = writer.path / tables.KERNEL_STAMPS
    if not path.is_file():
        return
    try:
        launches, warnings = kernel_stamps.read_stamps(path, label or f"the run's {tables.KERNEL_STAMPS}")
    except RoseprofError as e:
        if label is not None:
            raise
        trace.warnings.append(f"{e}: no regions inside kernels")
        return
    trace.warnings.extend(warnings)
    kernel_stamps.attach(trace, launches, label or tables.KERNEL_STAMPS)


def import_file(
    store: RunStore,
    path: str | list[str],
    name: str | None,
    steplog: str | None,
    analyse: Analyse,
    pick_reader: PickReader,
    manifest: dict | None = None,
    limits: Limits | None = None,
    skipped: list[str] | None = None,
    stamps: str | None = None,
) -> Run:
    """`roseprof import`: any file a driver reads, into a new run (a copy of it in raw/, never a link). The
    reader is chosen by `pick_reader(path, label)` (drivers/__init__.py), passed in like `analyse`. Several
    files (one per rank) become one run where their driver reads several as one (`Reader.read_many`: Kineto).

    `limits` (drivers/base.py: Limits) bound what reading the files may inflate; `skipped` says which files
    given (a folder's) were left out as no trace, first among the run's warnings. `stamps`: a fused kernel's
    stamps file (roseinfer/cuda_ext/stamps.py), copied into the run and read into GPU ranges; without it, the
    step log's folder's kernel_stamps.jsonl where there is one (a capture's run folder).

    Every error names the user's file (`path`), never the run's copy of it, and leaves no run folder behind."""
    paths = [path] if isinstance(path, str) else list(path)
    for p in paths:
        src = Path(p)
        if not src.exists():
            raise RoseprofError(f"{p}: no such file")
        if src.is_dir():
            raise RoseprofError(
                f"{p}: is a folder; give a trace file (roseprof import --help lists the kinds)"
            )
    readers = [pick_reader(Path(p), p) for p in paths]
    reader = readers[0]
    if len(paths) > 1:
        other = next((p for p, r in zip(paths, readers) if r.tool != reader.tool), None)
        if other is not None:
            raise RoseprofError(
                f"{other}: is a {readers[paths.index(other)].tool} file; the others are {reader.tool}'s"
            )
        if reader.read_many is None:
            raise RoseprofError(
                f"{paths[0]}: several {reader.tool} files are not one run (one file per rank is read for "
                "torch.profiler / Kineto traces; an nsys capture holds every process in one file)"
            )
    if reader.tool == "steps" and steplog is None:
        # a step log alone (drivers/steps): the file is the run's log as well as its source
        steplog = paths[0]
    if steplog is not None and not Path(steplog).is_file():
        raise RoseprofError(f"{steplog}: no such step log")
    if steplog is not None and Path(steplog).stat().st_size == 0:  # (the reader takes an empty log for none)
        raise RoseprofError(f"{steplog}: not a roseinfer step log (the file is empty)")
    if stamps is not None and not Path(stamps).is_file():
        raise RoseprofError(f"{stamps}: no such stamps file")
    if stamps is None and steplog is not None and (Path(steplog).parent / tables.KERNEL_STAMPS).is_file():
        stamps = str(Path(steplog).parent / tables.KERNEL_STAMPS)
    first = Path(paths[0])
    writer = store.new_run(name or _stem(first.name, reader.suffixes), reader.tool)
    try:
        sources = [str(Path(p).resolve()) for p in paths]
        writer.manifest.update(source=sources[0], environment=environment.describe(), **(manifest or {}))
        if len(sources) > 1:
            writer.manifest["sources"] = sources  # one file per rank, in the order they were merged
        copies = []
        for i, p in enumerate(paths):
            # Two ranks' files may share a name (rank folders): the second and later keep theirs behind an index.
            copy = writer.raw / (Path(p).name if len(paths) == 1 else f"{i:03d}-{Path(p).name}")
            # A copy, not a hard link: editing the user's file later must not change the run's raw data.
            _copy(Path(p), copy, p)
            copies.append(copy)
        if len(paths) == 1:
            trace = reader.read(copies[0], writer.raw, paths[0], limits)
        else:
            trace = reader.read_many(copies, writer.raw, paths, limits)
        trace.warnings[:0] = skipped or []
        log_path = None
        if steplog is not None:
            log_path = writer.path / tables.STEPLOG
            # Every rank's log, named in the run folder as the engine names them in a capture.
            for rank, log in rank_log_paths(steplog).items():
                _copy(Path(log), Path(rank_path(str(log_path), rank)), log)
        if stamps is not None:
            _copy(Path(stamps), writer.path / tables.KERNEL_STAMPS, stamps)
        try:
            _ingest(writer, trace, log_path, analyse, stamps_label=stamps)
        except Unreadable as e:  # named by the user's file (or their files' folder)
            raise RoseprofError(f"{paths[0] if len(paths) == 1 else first.parent}: {e}") from None
        return writer.finish("complete", exit_code=0, message=None)
    except OSError as e:
        writer.abort()
        raise RoseprofError(f"{paths[0]}: could not store the run in {store.root} ({_os_error(e)})") from None
    except BaseException:
        writer.abort()  # bad input leaves no run folder behind
        raise


def _copy(src: Path, dst: Path, label: str) -> None:
    try:
        with open(src, "rb"):
            pass
    except OSError as e:
        raise RoseprofError(f"{label}: cannot read ({e.strerror})") from None
    shutil.copyfile(src, dst)


def _stem(filename: str, suffixes: tuple[str, ...]) -> str:
    """The file's name without the suffix that chose its reader (trace.json.gz -> trace)."""
    for suffix in sorted(suffixes, key=len, reverse=True):
        if filename.lower().endswith(suffix) and len(filename) > len(suffix):
            return filename[: -len(suffix)]
    return Path(filename).stem or filename


def capture_series(capture_one: Callable[[dict], CaptureOutcome], repeat: int) -> list[CaptureOutcome]:
    """`--repeat N`: N captures of the same command, each its own complete run with the same name (a group that
    `roseprof diff` compares as one side). The first that does not complete stops the series; its exit code is
    the series'."""
    outcomes: list[CaptureOutcome] = []
    for i in range(repeat):
        outcomes.append(capture_one({"repeat": {"index": i + 1, "of": repeat}} if repeat > 1 else {}))
        if outcomes[-1].exit_code != 0:
            break
    return outcomes
