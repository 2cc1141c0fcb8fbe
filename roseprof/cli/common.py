"""What every verb shares: the click group, the store options, exit codes, and showing a run's dashboard."""

from __future__ import annotations

import click

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


def show_dashboard(run, dashboards_dir, open_browser: bool, progress=None) -> None:
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
