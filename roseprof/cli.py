"""The `roseprof` command line: parses options and calls the library; nothing else lives here."""

from __future__ import annotations

import json
import sys

import click

from roseprof.cli_vs import VsCommand
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
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="capture CMD N times: N runs of one name, a group `roseprof diff` compares as one side",
)
@store_options
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def nsys(name, trace, capture_range, nvtx_capture, open_, repeat, traces_dir, dashboards_dir, cmd) -> None:
    """Run CMD under Nsight Systems (the built-in engine benchmark when no CMD is given after --)."""
    from roseprof.api import capture_nsys

    outcomes = capture_nsys(
        RunStore(traces_dir), list(cmd) or None, name, trace, capture_range, nvtx_capture, repeat
    )
    _report_captures(outcomes, repeat, dashboards_dir, open_)


def _report_captures(outcomes, repeat: int, dashboards_dir, open_: bool) -> None:
    """Each run's summary (one line each but the last for a series), its dashboard, and the exit code."""
    from roseprof.render.terminal import make_console, print_summary

    console = make_console()
    for i, outcome in enumerate(outcomes):
        if i < len(outcomes) - 1:
            click.echo(f"run {i + 1}/{repeat}: {outcome.run.id} {outcome.run.manifest.get('status')}")
        else:
            if repeat > 1:
                click.echo(f"run {i + 1}/{repeat}:")
            print_summary(console, outcome.run, outcome.summary)
        if outcome.summary is not None:
            _dashboard(outcome.run, dashboards_dir, open_ and i == len(outcomes) - 1)
    if repeat > 1 and len(outcomes) < repeat:
        click.echo(f"series stopped after run {len(outcomes)} of {repeat}: it did not complete", err=True)
    sys.exit(outcomes[-1].exit_code)


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


@cli.command("import", epilog=EXIT_CODES)
@click.argument("path")
@click.option("--name", help="a name for the run (default: the file's name)")
@click.option("--steplog", help="the engine's step log of the same run (ROSEINFER_STEP_LOG)")
@store_options
def import_(path, name, steplog, traces_dir, dashboards_dir) -> None:
    """Import a trace file as a run (nsys .sqlite/.nsys-rep, ncu .ncu-rep or CSV export; the driver is picked by
    suffix, then content)."""
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


@cli.command(
    cls=VsCommand,
    epilog="Exit codes: 0 no regression; 1 a gated metric regressed; 2 bad input or usage.",
)
@click.argument("runs", nargs=-1)
@click.option("--vs", "vs", multiple=True, metavar="RUN...", help="the after side: RUNS --vs RUNS")
@click.option(
    "--baseline", metavar="NAME", help="the before side is this baseline's runs: --baseline NAME RUNS"
)
@click.option(
    "--latest", is_flag=True, help="a name means its latest run only (default: all its complete runs)"
)
@click.option("--json", "as_json", is_flag=True, help='print {"a": ..., "b": ..., "metrics": [...]}')
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
    runs, vs, baseline, latest, as_json, threshold, metrics, allow_incomplete, top, traces_dir, dashboards_dir
) -> None:
    """Compare runs before (A) with runs after (B): `diff A B`, `diff A1 A2 --vs B1 B2`, `diff --baseline NAME B`.

    A run id (or unique prefix) is that run; a name is every complete run with that name (--latest: its latest
    run). Several runs a side are compared with a hierarchical bootstrap (runs, then steps inside each run)."""
    from roseprof.api import diff_runs
    from roseprof.render.diff_dashboard import render_diff
    from roseprof.render.terminal import make_console, print_diff

    runs = list(runs)
    if baseline and vs:
        raise RoseprofError("give --baseline NAME RUN... or RUN... --vs RUN..., not both")
    if baseline:
        refs_a, refs_b = [], runs
    elif vs:
        refs_a, refs_b = runs, list(vs)
    elif len(runs) == 2:
        refs_a, refs_b = runs[:1], runs[1:]
    else:
        refs_a, refs_b = [], []
    if (not baseline and not refs_a) or not refs_b:
        raise RoseprofError(
            "diff needs two sides: `diff A B`, `diff A1 A2 --vs B1 B2` or `diff --baseline NAME B` "
            f"(got {len(runs)} run reference(s))"
        )
    result, samples = diff_runs(
        RunStore(traces_dir),
        refs_a,
        refs_b,
        threshold,
        list(metrics) or None,
        allow_incomplete,
        latest=latest,
        baseline=baseline,
    )
    result["dashboard"] = str(render_diff(result, samples, dashboards_dir))
    if as_json:
        click.echo(
            json.dumps(
                {k: result[k] for k in ("a", "b", "method", "metrics", "kernels", "regressions")}, indent=1
            )
        )
    else:
        print_diff(make_console(), result, top)
        click.echo(f"dashboard: {result['dashboard']}")
    sys.exit(1 if result["regressions"] else 0)


@cli.group()
def baseline() -> None:
    """Named baselines: sets of runs kept under a name (in the traces folder) to diff against in CI."""


@baseline.command("set")
@click.argument("name")
@click.argument("runs", nargs=-1, required=True)
@click.option(
    "--latest", is_flag=True, help="a run name means its latest run only (default: all its complete runs)"
)
@store_options
def baseline_set(name, runs, latest, traces_dir, dashboards_dir) -> None:
    """Keep RUNS (ids, prefixes or names) under NAME, replacing what NAME meant before."""
    from roseprof.api import set_baseline

    entry, found = set_baseline(RunStore(traces_dir), name, list(runs), latest)
    click.echo(f"baseline {name}: {len(found)} run(s): {', '.join(entry['runs'])}")


@baseline.command("ls")
@click.option("--json", "as_json", is_flag=True, help="print baselines.json's entries")
@store_options
def baseline_ls(as_json, traces_dir, dashboards_dir) -> None:
    """List the baselines: name, when set, and their runs."""
    from roseprof.run.baselines import read_all

    entries = read_all(RunStore(traces_dir))
    if as_json:
        click.echo(json.dumps(entries, indent=1))
        return
    for name, e in sorted(entries.items()):
        click.echo(f"{name}  {e['created_utc']}  {len(e['runs'])} run(s): {' '.join(e['runs'])}")
    if not entries:
        click.echo("no baselines (roseprof baseline set NAME RUN...)")


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

    path = ensure_dashboard(run, dashboards_dir)
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
