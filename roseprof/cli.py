"""The `roseprof` command line: parses options and calls the library; nothing else lives here."""

from __future__ import annotations

import json
import math
import sys

import click

from roseprof.errors import RoseprofError, one_line
from roseprof.render.safe_text import plain
from roseprof.run.store import RunStore, damage_is_one_line

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
    from roseprof.api import capture_nsys
    from roseprof.render.terminal import make_console, print_summary

    outcome = capture_nsys(RunStore(traces_dir), list(cmd) or None, name, trace, capture_range, nvtx_capture)
    _after_storing(outcome.run, lambda: print_summary(make_console(), outcome.run, outcome.summary))
    if outcome.summary is not None:
        _after_storing(outcome.run, lambda: _dashboard(outcome.run, dashboards_dir, open_))
    sys.exit(outcome.exit_code)


@cli.command("import", epilog=EXIT_CODES)
@click.argument("path")
@click.option("--name", help="a name for the run (default: the file's name)")
@click.option("--steplog", help="the engine's step log of the same run (ROSEINFER_STEP_LOG)")
@store_options
def import_(path, name, steplog, traces_dir, dashboards_dir) -> None:
    """Import a trace file as a run (nsys .sqlite/.nsys-rep; the driver is picked by suffix, then content)."""
    from roseprof.api import import_path
    from roseprof.render.terminal import make_console, print_summary

    run = import_path(RunStore(traces_dir), path, name, steplog)
    _after_storing(run, lambda: print_summary(make_console(), run, run.summary()))
    _after_storing(run, lambda: _dashboard(run, dashboards_dir, False))


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
    with damage_is_one_line(found):
        summary = found.summary() if (found.path / "summary.json").is_file() else None
        if as_json:
            if summary is None:
                raise RoseprofError(
                    f"run {found.id} has no summary.json (status {found.manifest.get('status')})"
                )
            click.echo(json.dumps(summary, indent=1))
        else:
            print_summary(make_console(), found, summary)


@cli.command(epilog="Exit codes: 0 no regression; 1 a gated metric regressed; 2 bad input or usage.")
@click.argument("run_a")
@click.argument("run_b")
@click.option("--json", "as_json", is_flag=True, help='print {"a": ..., "b": ..., "metrics": [...]}')
@click.option(
    "--fail-on-regression",
    "threshold",
    type=click.FloatRange(min=0),
    callback=lambda ctx, param, v: _finite(param, v),
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
    from roseprof.render.terminal import make_console, print_diff

    store = RunStore(traces_dir)
    with damage_is_one_line(run_a, run_b):
        result, samples = diff_runs(store, run_a, run_b, threshold, list(metrics) or None, allow_incomplete)
    # The verdict is the product; a dashboard that cannot be written is a warning, not a different exit code.
    try:
        result["dashboard"] = str(render_diff(result, samples, dashboards_dir))
    except OSError as e:
        result["dashboard"] = None
        _warn(f"diff dashboard not written ({_os_error(e)})")
    if as_json:
        click.echo(
            json.dumps(
                {k: result[k] for k in ("a", "b", "method", "metrics", "kernels", "regressions")}, indent=1
            )
        )
    else:
        print_diff(make_console(), result, top)
        if result["dashboard"]:
            click.echo(f"dashboard: {result['dashboard']}")
    sys.exit(1 if result["regressions"] else 0)


def _dashboard(run, dashboards_dir, open_browser: bool) -> None:
    try:
        from roseprof.render.run_dashboard import ensure_dashboard
    except ImportError as e:  # the run is stored; only the rendering is missing
        click.echo(
            f"dashboard: not rendered ({e.name} is not installed; `roseprof open {run.id}` renders it later)",
            err=True,
        )
        return
    from roseprof.render.system_browser import open_in_browser

    with damage_is_one_line(run):
        try:
            path = ensure_dashboard(run, dashboards_dir)
        except OSError as e:
            raise RoseprofError(f"dashboard not written to {dashboards_dir} ({_os_error(e)})") from None
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


def _after_storing(run, present) -> None:
    """Printing or rendering a run that is already stored: a failure is one warning line, and the run and the
    exit code stay what the capture or import made them (the run's data is whole; `roseprof show` and
    `roseprof open` present it again)."""
    try:
        present()
    except BrokenPipeError:
        raise
    except (RoseprofError, OSError) as e:
        _warn(
            f"{one_line(str(e) if isinstance(e, RoseprofError) else _os_error(e))}; the run {run.id} is stored"
        )
    except Exception as e:  # a bug in a renderer must not turn a stored run into a crash
        _warn(
            f"internal error while presenting the run ({type(e).__name__}: {one_line(str(e), 200)}); "
            f"the run {run.id} is stored"
        )


def _warn(line: str) -> None:
    click.echo(f"roseprof: warning: {plain(line)}", err=True)


def _os_error(e: OSError) -> str:
    return f"{e.strerror or type(e).__name__}" + (f": {e.filename}" if e.filename else "")


def _finite(param, value):
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite percentage", param=param)
    return value


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
        click.echo(f"roseprof: error: {plain(one_line(str(e)))}", err=True)
        sys.exit(e.exit_code)
    except OSError as e:  # a full disk or a folder we may not write, wherever it surfaced: one line
        click.echo(f"roseprof: error: {plain(one_line(_os_error(e)))}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("roseprof: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)


if __name__ == "__main__":
    main()
