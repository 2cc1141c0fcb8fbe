"""The verbs that make runs: capture (any tool's options) and import (any file a driver reads). They wire the
drivers, the capture pipeline, the analysis step and the store together; presenting the run is the caller's."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from roseprof.api.sections import analyse_trace
from roseprof.capture import environment, pipeline
from roseprof.errors import RoseprofError
from roseprof.run.store import Run, RunStore
from roseprof.workload.roseinfer import default_command, ncu_default_command


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
