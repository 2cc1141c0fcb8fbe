"""From a capture or a file to a finished run: capture, export, parse, analyse, store."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from roseprof import environment
from roseprof.analysis.summary import analyse_nsys
from roseprof.errors import CaptureFailed, RoseprofError
from roseprof.nsys_capture import export_sqlite, find_nsys, finish_report, nsys_version, profile
from roseprof.nsys_sqlite import read_nsys_sqlite
from roseprof.steplog import read_steplog
from roseprof.store import Run, RunStore, RunWriter
from roseprof.telemetry import TelemetrySampler

STEPLOG = "steplog.jsonl"


def default_command(device: str | None = None) -> list[str]:
    """The built-in engine benchmark, sized for the machine: tens of seconds on CPU, GPT-2 small on a GPU."""
    if device is None:
        try:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        except ImportError:
            device = "cpu"
    common = [
        sys.executable,
        "-m",
        "roseinfer.benchmark_streaming",
        "--warmup-runs",
        "0",
        "--repeat-runs",
        "1",
        "--no-stop-on-eos",
        "--mode",
        "online",
    ]
    if device == "cuda":
        return common + [
            "--hf-model-id",
            "gpt2",
            "--device",
            "cuda",
            "--num-requests",
            "64",
            "--max-batch-size",
            "64",
            "--max-new-tokens",
            "256",
        ]
    return common + [
        "--hf-model-id",
        "gpt2-tiny",
        "--device",
        "cpu",
        "--num-requests",
        "16",
        "--max-batch-size",
        "16",
        "--max-new-tokens",
        "320",
    ]


def ingest_sqlite(writer: RunWriter, sqlite_path: Path, steplog_path: Path | None) -> dict:
    """Parse and analyse an nsys SQLite export into the run being written; returns the summary."""
    trace = read_nsys_sqlite(str(sqlite_path))
    log = read_steplog(str(steplog_path)) if steplog_path is not None else None
    summary, tables = analyse_nsys(trace, log)
    summary["run_id"] = writer.run_id
    summary["tool"] = {"name": "nsys", "version": trace.tool_version, "schema": trace.schema_version}
    writer.manifest["tool"] = summary["tool"]
    if trace.gpus and not writer.manifest.get("gpus"):
        writer.manifest["gpus"] = trace.gpus
    # Normalised data: enough for dashboards and diffs without the raw trace.
    np.savez(  # uncompressed: zlib on 1M-row columns costs seconds and the files are scratch-sized
        writer.path / "ranges.npz",
        start=trace.range_start,
        end=trace.range_end,
        name=trace.range_name,
        domain=trace.range_domain,
        tid=trace.range_tid,
    )
    np.savez(
        writer.path / "gpu_ops.npz",
        kind=trace.op_kind,
        start=trace.op_start,
        end=trace.op_end,
        name=trace.op_name,
        api_start=trace.api_start,
        api_tid=trace.api_tid,
    )
    writer.write("names.json", {"names": trace.names, "domains": trace.domains})
    writer.write("steps.json", {"regions": tables["step_regions"], "rows": tables["steps"]})
    writer.write("itl.json", tables["itl_series"])
    writer.write("summary.json", summary)
    return summary


@dataclass
class CaptureOutcome:
    run: Run
    exit_code: int  # 0 complete; 1 the command failed; 130 interrupted
    summary: dict | None


def capture_nsys(
    store: RunStore,
    cmd: list[str] | None,
    name: str | None,
    trace: str | None,
    capture_range: str,
    nvtx_capture: str | None,
) -> CaptureOutcome:
    nsys = find_nsys()
    if nsys is None:
        raise RoseprofError("nsys not found: set NSYS, put it on PATH, or run scripts/install-nsys.sh")
    command = cmd or default_command()
    gpus = environment.gpus()
    trace = trace or ("cuda,nvtx,osrt" if gpus else "nvtx,osrt")
    writer = store.new_run(name or ("demo" if not cmd else Path(command[0]).name), "nsys")
    env = dict(os.environ)
    env["ROSEINFER_NVTX"] = "1"
    env["ROSEINFER_STEP_LOG"] = str(writer.path / STEPLOG)
    writer.manifest.update(
        command=command,
        cwd=os.getcwd(),
        environment=environment.describe(env),
        gpus=gpus,
        nsys={"path": nsys, "version": nsys_version(nsys), "trace": trace, "capture_range": capture_range},
    )
    out_base = writer.raw / "trace"
    status, exit_code, message, summary = "complete", 0, None, None
    sampler = TelemetrySampler()
    sampling = bool(gpus) and sampler.start()
    try:
        rc, interrupted = profile(
            nsys, command, out_base, trace, capture_range, nvtx_capture, env, writer.raw / "nsys.log"
        )
    except KeyboardInterrupt:
        rc, interrupted = 130, True
    except CaptureFailed as e:
        writer.finish("failed", exit_code=3, message=str(e))
        raise
    finally:
        samples = sampler.stop() if sampling else []
    if samples:
        writer.write(
            "telemetry.json", {"clock": "monotonic_ns", "interval_s": sampler.interval_s, "samples": samples}
        )
    writer.manifest["command_exit_code"] = rc
    if interrupted:
        status, exit_code, message = "incomplete", 130, "interrupted (Ctrl-C); kept what was captured"
    elif rc != 0:
        status, exit_code, message = "failed", 1, f"the command exited with code {rc}"
    try:
        rep = finish_report(nsys, out_base)
        sqlite_path = export_sqlite(nsys, rep, out_base.with_suffix(".sqlite"))
        summary = ingest_sqlite(writer, sqlite_path, writer.path / STEPLOG)
    except (RoseprofError, KeyboardInterrupt) as e:
        # Nothing to parse: keep the run (with nsys' own log) and say why.
        status = "failed" if status == "complete" else status
        why = "interrupted while exporting" if isinstance(e, KeyboardInterrupt) else str(e)
        message = f"{message}; {why}" if message else why
        exit_code = exit_code or (e.exit_code if isinstance(e, RoseprofError) else 130)
    run = writer.finish(status, exit_code=exit_code, message=message)
    return CaptureOutcome(run, exit_code, summary)


def import_path(store: RunStore, path: str, name: str | None, steplog: str | None) -> Run:
    """`roseprof import`: an .nsys-rep (exported with nsys) or an nsys .sqlite, into a new run."""
    src = Path(path)
    if not src.exists():
        raise RoseprofError(f"{path}: no such file")
    if src.is_dir():
        raise RoseprofError(f"{path}: is a folder; give an .nsys-rep or nsys .sqlite file")
    suffix = src.suffix.lower()
    if suffix not in (".nsys-rep", ".qdrep", ".sqlite", ".db"):
        raise RoseprofError(
            f"{path}: unknown file type {suffix or '(none)'}; roseprof import reads .nsys-rep and nsys .sqlite"
        )
    if steplog is not None and not Path(steplog).is_file():
        raise RoseprofError(f"{steplog}: no such step log")
    writer = store.new_run(name or src.stem, "nsys")
    try:
        writer.manifest.update(source=str(src.resolve()), environment=environment.describe())
        if suffix in (".nsys-rep", ".qdrep"):
            nsys = find_nsys()
            if nsys is None:
                raise RoseprofError(
                    "importing an .nsys-rep needs nsys to export it: set NSYS or put nsys on PATH"
                )
            rep = writer.raw / src.name
            _link_or_copy(src, rep)
            sqlite_path = export_sqlite(nsys, rep, writer.raw / (src.stem + ".sqlite"))
        else:
            sqlite_path = writer.raw / src.name
            _link_or_copy(src, sqlite_path)
        log_path = None
        if steplog is not None:
            log_path = writer.path / STEPLOG
            shutil.copyfile(steplog, log_path)
        ingest_sqlite(writer, sqlite_path, log_path)
    except BaseException:
        writer.abort()  # bad input leaves no run folder behind
        raise
    return writer.finish("complete", exit_code=0, message=None)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
