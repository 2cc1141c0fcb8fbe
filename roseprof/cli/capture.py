"""The capture verbs: `roseprof nsys`, `roseprof ncu`, `roseprof torch` (each runs a command under its tool)."""

from __future__ import annotations

import sys

import click

from roseprof.cli.common import (
    CAPTURE_EXIT_CODES,
    after_storing,
    cli,
    invocation,
    open_store,
    print_run,
    show_dashboard,
    store_options,
)


@cli.command(context_settings={"allow_interspersed_args": False}, epilog=CAPTURE_EXIT_CODES)
@click.option("--name", help="a name for the run (default: nsys-demo, or nsys-<the command's name>)")
@click.option("--trace", help="nsys --trace list (default: cuda,nvtx,osrt with a GPU, nvtx,osrt without)")
@click.option(
    "--capture-range",
    type=click.Choice(["none", "cudaProfilerApi", "nvtx"]),
    default="none",
    show_default=True,
)
@click.option(
    "--nvtx-capture",
    help="with --capture-range nvtx: the range that starts the capture (default roseinfer.decode_step; with "
    "--capture-range-end repeat roseinfer.capture_window, a server's capture window)",
)
@click.option(
    "--capture-range-end",
    metavar="none|stop|repeat[:N]",
    callback=lambda ctx, param, value: _range_end(value),
    help="what nsys does when the range ends (default: none with an NVTX range); repeat: record every range again, "
    "a report each: `-- roseinfer serve MODEL --enable-profiling` records only its capture windows "
    '(POST /profile/start {"tool": "nsys"}, roseprof live --tool nsys)',
)
@click.option("--open", "open_", is_flag=True, help="open the dashboard when done")
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="capture CMD N times: N runs of one name, a group `roseprof diff` compares as one side",
)
@click.option(
    "--step-range",
    metavar="NAME",
    help="the NVTX or record_function range that is one step of your program (per-step and steady-state views)",
)
@store_options
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def nsys(
    name, trace, capture_range, nvtx_capture, capture_range_end, open_, repeat, step_range, traces_dir,
    dashboards_dir, cmd,
) -> None:  # fmt: skip
    """Run CMD under Nsight Systems (the built-in engine benchmark when no CMD is given after --).

    A CMD that starts with `-` extends the built-in command: `roseprof nsys -- --no-batched-kv-append` runs the
    benchmark with that engine flag (a later flag wins: `-- --max-new-tokens 64`); `roseprof show RUN` prints the
    whole command. The engine's flags: python -m roseinfer.benchmark_streaming --help, docs/ENGINE.md.
    """
    from roseprof.drivers.nsys.capture import NsysOptions

    if capture_range_end is not None and capture_range == "none":
        raise click.UsageError("--capture-range-end needs --capture-range nvtx or cudaProfilerApi")
    options = NsysOptions(trace, capture_range, nvtx_capture, capture_range_end)
    _capture(options, cmd, name, repeat, step_range, traces_dir, dashboards_dir, open_)


def _range_end(value: str | None) -> str | None:
    """--capture-range-end as nsys 2022.4 takes it (none, stop, repeat, repeat:N); a usage error otherwise."""
    import re

    if value is None or re.fullmatch(r"none|stop|repeat(?::[1-9]\d*)?", value):
        return value
    raise click.BadParameter(f"{value!r} is none of none, stop, repeat, repeat:N (N >= 1)")


def _capture(options, cmd, name, repeat, step_range, traces_dir, dashboards_dir, open_) -> None:
    """Every capture verb: the library's one capture entry, its stages on stderr, then the report."""
    from roseprof.api import capture
    from roseprof.render.progress import CaptureProgress

    store = open_store(traces_dir)
    progress = CaptureProgress()
    try:
        outcomes = capture(store, options, list(cmd) or None, name, repeat, progress, step_range)
    finally:
        progress.pause()
    _report_captures(store, outcomes, repeat, dashboards_dir, open_, progress)


def _report_captures(store, outcomes, repeat: int, dashboards_dir, open_: bool, progress=None) -> None:
    """Each run's summary (one line each but the last for a series), its dashboard, what to do next, and the
    exit code."""
    from roseprof.api import previous_run
    from roseprof.render.console import make_console
    from roseprof.render.progress import print_next, print_next_group

    console = make_console()
    for i, outcome in enumerate(outcomes):
        last = i == len(outcomes) - 1
        if not last:
            click.echo(f"run {i + 1}/{repeat}: {outcome.run.id} {outcome.run.manifest.get('status')}")
        elif outcome.summary is None:  # nothing was analysed: the error and where the run is, on stderr
            click.echo("\n".join(_failure(outcome)), err=True)
            click.echo(f"run folder: {outcome.run.path}", err=True)
        else:
            if repeat > 1:
                click.echo(f"run {i + 1}/{repeat}:")
            after_storing(outcome.run, lambda o=outcome: print_run(console, o.run, o.summary))
            if outcome.exit_code != 0:
                click.echo("\n".join(_failure(outcome)), err=True)
        if outcome.summary is not None:
            after_storing(
                outcome.run,
                lambda o=outcome, last=last: show_dashboard(o.run, dashboards_dir, open_ and last, progress),
            )
    final = outcomes[-1]
    if repeat > 1 and len(outcomes) < repeat:
        click.echo(f"series stopped after run {len(outcomes)} of {repeat}: it did not complete", err=True)
    elif final.exit_code == 0:
        if repeat > 1:
            print_next_group(console, final.run.manifest.get("name") or "", repeat, invocation())
        else:
            previous = previous_run(store, final.run)
            print_next(console, final.run.id, previous.id if previous else None, invocation())
    sys.exit(final.exit_code)


def _failure(outcome) -> list[str]:
    """A capture that did not complete, in lines that fit the terminal: the error, then what to do (a command to
    paste whole, or a folder). The run's folder, wherever the message names it, is never broken (its path may hold
    spaces): whole beside the words, or alone on its line where it does not fit."""
    from roseprof.capture.process import terminal_width
    from roseprof.errors import one_line
    from roseprof.render.commands import pasteable
    from roseprof.render.safe_text import plain
    from roseprof.render.wrap import wrap_words

    m, code, width = outcome.run.manifest, outcome.exit_code, terminal_width()
    said = one_line(m.get("message") or f"the capture ended with exit code {code}")
    show = [invocation(), "show", outcome.run.id]
    if code == 1 and outcome.summary is None:
        todo, command = "the command's own output above says why; fix it and capture again", None
    elif code == 1:
        todo, command = "what it recorded before is stored:", show
    elif code == 130:
        todo, command = "see what was captured with:", show  # (its message says it was kept)
    else:  # the profiler failed, or what it wrote could not be read: it is kept, with the tool's own log
        todo, command = f"what the profiler wrote, and its own log, are kept in {outcome.run.path}/raw", None
    folder = plain(str(outcome.run.path))
    error = wrap_words(plain(f"roseprof: error: {said}; {todo}"), width, "", "  ", (folder,))
    return error + (pasteable([plain(word) for word in command], width, "  ") if command else [])


@cli.command(context_settings={"allow_interspersed_args": False}, epilog=CAPTURE_EXIT_CODES)
@click.option("--name", help="a name for the run (default: ncu-demo, or ncu-<the command's name>)")
@click.option(
    "--kernel", metavar="REGEX", help="profile kernels whose name matches REGEX (ncu --kernel-name regex:)"
)
@click.option(
    "--nvtx-include",
    multiple=True,
    metavar="RANGE",
    help="only kernels inside this NVTX range (repeatable; push/pop ranges end in '/', e.g. roseinfer.kv.append_token/)",
)
@click.option(
    "--launch-skip",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="matching launches to skip",
)
@click.option(
    "--launch-count",
    type=click.IntRange(min=0),
    default=None,
    help="matching launches to profile (default 100, with --from 5 per kernel; 0: all)",
)
@click.option(
    "--set",
    "section_set",
    help="ncu section set: basic, detailed, full (default: full, unless --section or --metrics is given)",
)
@click.option("--section", "sections", multiple=True, help="an ncu section to collect (repeatable)")
@click.option(
    "--metrics", help="ncu metrics to collect, comma-separated (gpu__time_duration.sum is always added)"
)
@click.option(
    "--from", "from_run", metavar="RUN", help="profile the top kernels by GPU time of this nsys or torch run"
)
@click.option(
    "--top", type=click.IntRange(min=1), default=5, show_default=True, help="with --from: how many kernels"
)
@click.option("--open", "open_", is_flag=True, help="open the dashboard when done")
@store_options
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def ncu(
    name,
    kernel,
    nvtx_include,
    launch_skip,
    launch_count,
    section_set,
    sections,
    metrics,
    from_run,
    top,
    open_,
    traces_dir,
    dashboards_dir,
    cmd,
) -> None:
    """Profile kernels of CMD with Nsight Compute (clocks left alone, NVTX on). Without CMD: the --from run's
    command, or the engine benchmark sized for ncu.

    A CMD that starts with `-` extends that command: `roseprof ncu -- --no-batched-kv-append` adds the engine
    flag (a later flag wins).
    """
    from roseprof.drivers.ncu.options import NcuOptions

    options = NcuOptions(
        kernel=kernel,
        nvtx_include=tuple(nvtx_include),
        launch_skip=launch_skip,
        launch_count=launch_count,
        section_set=section_set,
        sections=tuple(sections),
        metrics=metrics,
        from_run=from_run,
        top=top,
    )
    _capture(options, cmd, name, 1, None, traces_dir, dashboards_dir, open_)


@cli.command(context_settings={"allow_interspersed_args": False}, epilog=CAPTURE_EXIT_CODES)
@click.option("--name", help="a name for the run (default: torch-demo, or torch-<the command's name>)")
@click.option("--wait", type=int, default=8, show_default=True, help="decode steps skipped before the window")
@click.option("--warmup", type=int, default=2, show_default=True, help="decode steps profiled and discarded")
@click.option("--active", type=int, default=128, show_default=True, help="decode steps recorded")
@click.option(
    "--with-stack", is_flag=True, help="record Python stacks with every op (slower while recording)"
)
@click.option("--cpu-only", is_flag=True, help="CPU activity only, even where CUDA exists")
@click.option("--open", "open_", is_flag=True, help="open the dashboard when done")
@click.option(
    "--step-range",
    metavar="NAME",
    help="the NVTX or record_function range that is one step of your program (per-step and steady-state views)",
)
@store_options
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def torch(
    name, wait, warmup, active, with_stack, cpu_only, open_, step_range, traces_dir, dashboards_dir, cmd
) -> None:
    """Run CMD with torch.profiler on (the built-in engine benchmark when no CMD is given after --).

    The engine profiles a window of decode steps (--wait, --warmup, --active). Another program finds a folder in
    $ROSEPROF_TORCH_TRACE_DIR and writes its own trace there (e.g. torch.profiler.tensorboard_trace_handler).

    A CMD that starts with `-` extends the built-in command: `roseprof torch -- --no-batched-kv-append` runs the
    benchmark with that engine flag (a later flag wins).
    """
    from roseprof.drivers.torch.capture import TorchOptions

    options = TorchOptions(wait, warmup, active, with_stack, cpu_only)
    _capture(options, cmd, name, 1, step_range, traces_dir, dashboards_dir, open_)
