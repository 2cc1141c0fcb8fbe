"""The `roseprof` command line: parses options and calls the library; nothing else lives here."""

from __future__ import annotations

import json
import sys

import click

from roseprof.errors import RoseprofError
from roseprof.run.store import RunStore

EXIT_CODES = "Exit codes: 0 ok; 1 the profiled command failed; 2 bad input or usage; 3 the profiler failed; 130 interrupted."


def store_options(f):
    f = click.option(
        "--dashboards-dir",
        envvar="ROSEPROF_DASHBOARDS_DIR",
        default="dashboards",
        show_default=True,
        type=click.Path(file_okay=False),
        help="where HTML dashboards go (env ROSEPROF_DASHBOARDS_DIR)",
    )(f)
    f = click.option(
        "--traces-dir",
        envvar="ROSEPROF_TRACES_DIR",
        default="traces",
        show_default=True,
        type=click.Path(file_okay=False),
        help="where runs are stored (env ROSEPROF_TRACES_DIR)",
    )(f)
    return f


@click.group(epilog=EXIT_CODES)
@click.version_option(package_name="roseinfer", prog_name="roseprof")
def cli() -> None:
    """Capture, parse and compare profiles of roseinfer (or any command)."""


@cli.command(context_settings={"allow_interspersed_args": False}, epilog=EXIT_CODES)
@click.option("--name", help="a name for the run (default: demo, or the command's name)")
@click.option("--trace", help="nsys --trace list (default: cuda,nvtx,osrt with a GPU, nvtx,osrt without)")
@click.option(
    "--capture-range",
    type=click.Choice(["none", "cudaProfilerApi", "nvtx"]),
    default="none",
    show_default=True,
)
@click.option("--nvtx-capture", help="with --capture-range nvtx: the range that starts the capture")
@click.option("--open", "open_", is_flag=True, help="open the dashboard when done")
@store_options
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def nsys(name, trace, capture_range, nvtx_capture, open_, traces_dir, dashboards_dir, cmd) -> None:
    """Run CMD under Nsight Systems (the built-in engine benchmark when no CMD is given after --)."""
    from roseprof.api import capture_nsys, previous_run
    from roseprof.render.progress import CaptureProgress, print_next
    from roseprof.render.terminal import make_console, print_summary

    store = RunStore(traces_dir)
    progress = CaptureProgress()
    try:
        outcome = capture_nsys(
            store, list(cmd) or None, name, trace, capture_range, nvtx_capture, progress=progress
        )
    finally:
        progress.pause()
    console = make_console()
    print_summary(console, outcome.run, outcome.summary)
    if outcome.summary is not None:
        _dashboard(outcome.run, dashboards_dir, open_, progress)
    if outcome.exit_code == 0:
        previous = previous_run(store, outcome.run)
        print_next(console, outcome.run.id, previous.id if previous else None)
    sys.exit(outcome.exit_code)


@cli.command(context_settings={"allow_interspersed_args": False}, epilog=EXIT_CODES)
@click.option("--name", help="a name for the run (default: ncu-demo, or the command's name)")
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
    command, or the engine benchmark sized for ncu."""
    from roseprof.api import capture_ncu
    from roseprof.render.terminal import make_console, print_summary

    outcome = capture_ncu(
        RunStore(traces_dir),
        list(cmd) or None,
        name,
        kernel,
        tuple(nvtx_include),
        launch_skip,
        launch_count,
        section_set,
        tuple(sections),
        metrics,
        from_run,
        top,
    )
    print_summary(make_console(), outcome.run, outcome.summary)
    if outcome.summary is not None:
        _dashboard(outcome.run, dashboards_dir, open_)
    sys.exit(outcome.exit_code)


@cli.command(context_settings={"allow_interspersed_args": False}, epilog=EXIT_CODES)
@click.option("--name", help="a name for the run (default: demo, or the command's name)")
@click.option("--wait", type=int, default=8, show_default=True, help="decode steps skipped before the window")
@click.option("--warmup", type=int, default=2, show_default=True, help="decode steps profiled and discarded")
@click.option("--active", type=int, default=128, show_default=True, help="decode steps recorded")
@click.option(
    "--with-stack", is_flag=True, help="record Python stacks with every op (slower while recording)"
)
@click.option("--cpu-only", is_flag=True, help="CPU activity only, even where CUDA exists")
@click.option("--open", "open_", is_flag=True, help="open the dashboard when done")
@store_options
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def torch(name, wait, warmup, active, with_stack, cpu_only, open_, traces_dir, dashboards_dir, cmd) -> None:
    """Run CMD with torch.profiler on (the built-in engine benchmark when no CMD is given after --).

    The engine profiles a window of decode steps (--wait, --warmup, --active). Another program finds a folder in
    $ROSEPROF_TORCH_TRACE_DIR and writes its own trace there (e.g. torch.profiler.tensorboard_trace_handler).
    """
    from roseprof.api import capture_torch
    from roseprof.render.terminal import make_console, print_summary

    outcome = capture_torch(
        RunStore(traces_dir), list(cmd) or None, name, (wait, warmup, active), with_stack, cpu_only
    )
    print_summary(make_console(), outcome.run, outcome.summary)
    if outcome.summary is not None:
        _dashboard(outcome.run, dashboards_dir, open_)
    sys.exit(outcome.exit_code)


@cli.command(epilog=EXIT_CODES)
@click.argument("run")
@click.option("--format", "fmt", type=click.Choice(["chrome"]), default="chrome", show_default=True)
@click.option(
    "-o", "--output", help="the file to write (default: RUN's folder/trace.chrome.json.gz; .gz compresses)"
)
@store_options
def export(run, fmt, output, traces_dir, dashboards_dir) -> None:
    """Write a stored run as Chrome trace-event JSON, which ui.perfetto.dev and chrome://tracing open."""
    from roseprof.api import export_chrome

    click.echo(str(export_chrome(RunStore(traces_dir), run, output)))


@cli.command("import", epilog=EXIT_CODES)
@click.argument("path")
@click.option("--name", help="a name for the run (default: the file's name)")
@click.option("--steplog", help="the engine's step log of the same run (ROSEINFER_STEP_LOG)")
@store_options
def import_(path, name, steplog, traces_dir, dashboards_dir) -> None:
    """Import a trace file as a run: nsys .nsys-rep/.qdrep/.sqlite, torch.profiler / Kineto / Chrome-trace
    .json[.gz] (.pt.trace.json), ncu .ncu-rep or CSV export; the driver is picked by suffix, then content."""
    from roseprof.api import import_path
    from roseprof.render.terminal import make_console, print_summary

    run = import_path(RunStore(traces_dir), path, name, steplog)
    print_summary(make_console(), run, run.summary())
    _dashboard(run, dashboards_dir, False)


@cli.command("ls")
@click.option("--json", "as_json", is_flag=True, help="print the manifests as JSON")
@store_options
def ls(as_json, traces_dir, dashboards_dir) -> None:
    """List the stored runs, oldest first."""
    from roseprof.render.terminal import make_console, print_runs

    runs = RunStore(traces_dir).runs()
    if as_json:
        click.echo(json.dumps([{"id": r.id, **r.manifest} for r in runs], indent=1))
    else:
        print_runs(make_console(), runs)


@cli.command()
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="print summary.json")
@store_options
def show(run, as_json, traces_dir, dashboards_dir) -> None:
    """Show a run (RUN: id, unique id prefix, or name meaning the latest run with that name)."""
    from roseprof.render.terminal import make_console, print_summary

    found = RunStore(traces_dir).resolve(run)
    summary = found.summary() if (found.path / "summary.json").is_file() else None
    if as_json:
        if summary is None:
            raise RoseprofError(f"run {found.id} has no summary.json (status {found.manifest.get('status')})")
        click.echo(json.dumps(summary, indent=1))
    else:
        print_summary(make_console(), found, summary)


@cli.command(epilog="Exit codes: 0 no regression; 1 a gated metric regressed; 2 bad input or usage.")
@click.argument("run_a")
@click.argument("run_b")
@click.option(
    "--json", "as_json", is_flag=True, help='print {"a": ..., "b": ..., "verdict": {...}, "metrics": [...]}'
)
@click.option(
    "--fail-on-regression",
    "threshold",
    type=click.FloatRange(min=0),
    default=None,
    metavar="PCT",
    help="exit 1 when a gated metric grew by more than PCT% and significantly",
)
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    metavar="GLOB",
    help="metrics the gate looks at (repeatable glob; default: step-time and ITL medians and means)",
)
@click.option("--allow-incomplete", is_flag=True, help="compare what exists of incomplete or failed runs")
@click.option("--top", type=int, default=25, show_default=True, help="rows in the terminal table")
@store_options
def diff(
    run_a, run_b, as_json, threshold, metrics, allow_incomplete, top, traces_dir, dashboards_dir
) -> None:
    """Compare RUN_A (before) with RUN_B (after)."""
    from roseprof.api import diff_runs
    from roseprof.render.diff_dashboard import render_diff
    from roseprof.render.terminal import make_console
    from roseprof.render.terminal_diff import print_diff

    result, samples = diff_runs(
        RunStore(traces_dir), run_a, run_b, threshold, list(metrics) or None, allow_incomplete
    )
    result["dashboard"] = str(render_diff(result, samples, dashboards_dir))
    if as_json:
        click.echo(
            json.dumps(
                {k: result[k] for k in ("a", "b", "verdict", "method", "metrics", "kernels", "regressions")},
                indent=1,
            )
        )
    else:
        print_diff(make_console(), result, top)
        click.echo(f"dashboard: {result['dashboard']}")
    sys.exit(1 if result["regressions"] else 0)


def _dashboard(run, dashboards_dir, open_browser: bool, progress=None) -> None:
    try:
        from roseprof.render.run_dashboard import ensure_dashboard
    except ImportError as e:  # the run is stored; only the rendering is missing
        click.echo(
            f"dashboard: not rendered ({e.name} is not installed; `roseprof open {run.id}` renders it later)",
            err=True,
        )
        return
    from roseprof.render.system_browser import open_in_browser

    if progress is not None:
        progress("render", "rendering the dashboard")
    try:
        path = ensure_dashboard(run, dashboards_dir)
    finally:
        if progress is not None:
            progress.finish()
    click.echo(f"dashboard: {path}")
    if open_browser:
        open_in_browser(path)


@cli.command("open")
@click.argument("run")
@store_options
def open_(run, traces_dir, dashboards_dir) -> None:
    """Render RUN's dashboard if missing or stale, and open it (or print its path where there is no display)."""
    found = RunStore(traces_dir).resolve(run)
    if not (found.path / "summary.json").is_file():
        raise RoseprofError(
            f"run {found.id} has no summary.json (status {found.manifest.get('status')}): nothing to show"
        )
    _dashboard(found, dashboards_dir, True)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("roseprof: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except RoseprofError as e:
        click.echo(f"roseprof: error: {e}", err=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        click.echo("roseprof: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)


if __name__ == "__main__":
    main()
