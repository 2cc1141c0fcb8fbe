"""The verbs that make runs: capture (any tool's options) and import (any file a driver reads). They wire the
drivers, the capture pipeline, the analysis step and the store together; presenting the run is the caller's."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from roseprof.api.sections import analyse_trace
from roseprof.capture import environment, pipeline
from roseprof.run.store import Run, RunStore, created_order


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
    # A command that starts with an option is flags for the built-in command (or --from's): it extends it.
    extra, cmd = (list(cmd), None) if extends_default(cmd) else ([], cmd)
    # The command the user gave names the run, not one taken from --from's run.
    run_name = name or default_name(options.tool, cmd)
    manifest = _step_manifest(step_range)
    # The options as they run: what they take from an earlier run (ncu --from: its top kernels and command), the
    # tool's defaults.
    options, cmd = options.resolve(cmd, functools.partial(_source, store))
    capture_one = capturer(options, has_gpu=bool(gpus))
    command = (list(cmd) if cmd else options.default_command()) + extra
    analyser = _analyser(step_range)
    return pipeline.capture_series(
        lambda extra: pipeline.capture(
            store, capture_one, command, run_name, gpus, analyser, progress, {**extra, **manifest}
        ),
        repeat,
    )


def extends_default(cmd: list[str] | None) -> bool:
    """Whether a capture's CMD is extra flags for the built-in command (`roseprof nsys -- --no-batched-kv-append`)
    rather than a program: a program's name never starts with `-`."""
    return bool(cmd) and cmd[0].startswith("-")


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
        and created_order(r) < created_order(run)
    ]
    return earlier[-1] if earlier else None


def _source(store: RunStore, ref: str):
    """An earlier run that a capture's options take what to profile from (ncu --from): its id, its manifest, and
    its `top` kernels by GPU time, read only when asked for."""
    from roseprof.analysis.ncu import top_kernels

    run = store.resolve(ref)
    return run.id, run.manifest, lambda top: top_kernels(run.summary(), top)


def _analyser(step_range: str | None, **kw):
    """The analysis step of a capture or import: with --step-range, that range is the program's step."""
    return (
        functools.partial(analyse_trace, step_range=step_range, **kw) if step_range or kw else analyse_trace
    )


def _step_manifest(step_range: str | None) -> dict:
    return {"step_range": step_range} if step_range else {}


def import_path(
    store: RunStore,
    path: str | list[str],
    name: str | None,
    steplog: str | None,
    step_range: str | None = None,
    max_gzip_ratio: float | None = None,
    gzip_ratio_after_mib: int | None = None,
    stamps: str | None = None,
) -> Run:
    """`roseprof import`: any file a driver reads (picked by suffix, then content), into a new run; several files,
    or a folder of them (HTA's layout, rank-N.*.json[.gz]), as one run of several ranks (Kineto). A gzip file
    may inflate, past its first `gzip_ratio_after_mib` MiB, at most `max_gzip_ratio` times its compressed size
    (drivers/base.py: Limits; None: the defaults), so a decompression bomb is refused before it fills memory.
    `stamps`: a fused kernel's stamps file, read into GPU ranges of its launches (workload/kernel_stamps.py)."""
    analyse_import = _analyser(step_range, label=steplog or "the step log", strict=True)
    from roseprof.drivers import Limits, pick_reader, rank_files

    limits = Limits()
    if max_gzip_ratio is not None:
        limits = dataclasses.replace(limits, gzip_ratio=max_gzip_ratio)
    if gzip_ratio_after_mib is not None:
        limits = dataclasses.replace(limits, gzip_after_bytes=gzip_ratio_after_mib << 20)

    paths = [path] if isinstance(path, str) else list(path)
    files: list[str] = []
    skipped: list[str] = []  # a folder's files that are no trace
    for p in paths:
        if Path(p).is_dir():
            found, left_out = rank_files(Path(p), p)
            files += [str(f) for f in found]
            skipped += left_out
        else:
            files.append(p)
    return pipeline.import_file(
        store, files[0] if len(files) == 1 else files, name, steplog, analyse_import, pick_reader,
        _step_manifest(step_range), limits, skipped, stamps,
    )  # fmt: skip
