"""The verbs on stored runs and files: import, ls, show, open, export, diff, baseline."""

from __future__ import annotations

import json
import sys

import click

from roseprof.cli.common import (
    EXIT_CODES,
    after_storing,
    cli,
    finite,
    open_store,
    os_error,
    print_run,
    show_dashboard,
    store_options,
    warn,
)
from roseprof.cli.vs import VsCommand
from roseprof.errors import RoseprofError
from roseprof.run.store import damage_is_one_line


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
    from roseprof.export import written_in_place

    path = export_chrome(open_store(traces_dir), run, output)
    if not written_in_place(path):  # the file's path; a stream (-o /dev/stdout) holds the trace alone
        click.echo(str(path))


@cli.command("import", epilog=EXIT_CODES)
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option("--name", help="a name for the run (default: the file's name)")
@click.option(
    "--steplog",
    help="the engine's step log of the same run (ROSEINFER_STEP_LOG); rank 0's, where the other ranks' NAME.rank<r>.EXT lie beside it",
)
@click.option(
    "--stamps",
    metavar="FILE",
    help="a fused kernel's stamps (ROSEINFER_KERNEL_STAMPS): its launches' phases become regions inside the kernel "
    "(default: kernel_stamps.jsonl beside --steplog, where there is one)",
)
@click.option(
    "--step-range",
    metavar="NAME",
    help="the NVTX or record_function range that is one step of the program (per-step and steady-state views)",
)
@click.option(
    "--max-gzip-ratio",
    type=click.FloatRange(min=1),
    default=100,
    show_default=True,
    help="a .gz file may inflate at most this many times its size (past --gzip-ratio-after): a decompression bomb is refused",
)
@click.option(
    "--gzip-ratio-after", type=click.IntRange(min=0), default=1024, show_default=True, metavar="MIB",
    help="MiB a .gz file may inflate to before --max-gzip-ratio applies",
)  # fmt: skip
@store_options
def import_(
    paths, name, steplog, stamps, step_range, max_gzip_ratio, gzip_ratio_after, traces_dir, dashboards_dir
) -> None:
    """Import a trace file as a run: nsys .nsys-rep/.qdrep/.sqlite, torch.profiler / Kineto / Chrome-trace
    .json[.gz] (.pt.trace.json), ncu .ncu-rep or CSV export; the driver is picked by suffix, then content.
    Several Kineto files, or a folder of them (one per rank: rank-0.*.json.gz, rank-1.*, ...), are one run; a
    folder of step logs (roseinfer serve --capture-dir: its SLO captures) is one run per file."""
    from roseprof.api import import_path
    from roseprof.api.captures import import_each, step_log_files
    from roseprof.render.console import make_console

    captures = step_log_files(list(paths)) if steplog is None else None
    if captures is not None:  # a folder of step logs (SLO captures): each file a run of its own
        for run in import_each(open_store(traces_dir), captures, name):
            after_storing(run, lambda run=run: print_run(make_console(), run, run.summary()))
            after_storing(run, lambda run=run: show_dashboard(run, dashboards_dir, False))
        return
    run = import_path(
        open_store(traces_dir), list(paths), name, steplog, step_range, max_gzip_ratio, gzip_ratio_after,
        stamps=stamps,
    )  # fmt: skip
    after_storing(run, lambda: print_run(make_console(), run, run.summary()))
    after_storing(run, lambda: show_dashboard(run, dashboards_dir, False))


@cli.command("ls", epilog=EXIT_CODES)
@click.option("--json", "as_json", is_flag=True, help="print the manifests as JSON")
@store_options
def ls(as_json, traces_dir, dashboards_dir) -> None:
    """List the stored runs, oldest first."""
    from roseprof.render.console import make_console
    from roseprof.render.terminal import print_runs

    store = open_store(traces_dir)
    runs = store.runs()
    if as_json:
        click.echo(json.dumps([{"id": r.id, **r.manifest} for r in runs], indent=1))
    elif not runs:  # an empty table would not say which folder was looked in
        click.echo(f"no runs in {store.root}")
    else:
        print_runs(make_console(), runs)


@cli.command(epilog=EXIT_CODES)
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="print summary.json")
@store_options
def show(run, as_json, traces_dir, dashboards_dir) -> None:
    """Show a run (RUN: id, unique id prefix, or name meaning the latest run with that name)."""
    from roseprof.render.console import make_console

    found = open_store(traces_dir).resolve(run)
    with damage_is_one_line(found):
        if as_json:
            click.echo(json.dumps(found.summary(), indent=1))  # no summary.json: refused in one line
        else:
            print_run(make_console(), found)


@cli.command(
    cls=VsCommand,
    epilog="Exit codes: 0 no regression; 1 a gated metric regressed; 2 bad input or usage (a run against itself, "
    "a side mixing tools, commands or machines, different programs without --force); 130 interrupted.",
)
@click.argument("runs", nargs=-1)
@click.option("--vs", "vs", multiple=True, metavar="RUN...", help="the after side: RUNS --vs RUNS")
@click.option(
    "--baseline", metavar="NAME", help="the before side is this baseline's runs: --baseline NAME RUNS"
)
@click.option(
    "--latest", is_flag=True, help="a name means its latest run only (default: all its complete runs)"
)
@click.option(
    "--json", "as_json", is_flag=True, help='print {"a": ..., "b": ..., "verdict": {...}, "metrics": [...]}'
)
@click.option(
    "--fail-on-regression",
    "threshold",
    type=click.FloatRange(min=0),
    callback=finite,
    default=None,
    metavar="PCT",
    help="exit 1 when a change the verdict names (slower, beyond its noise floor) grew by more than PCT%; "
    "never on wall-clock figures a slower machine explains, nor on a region's CPU time it moved no more than the "
    "other regions'",
)
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    metavar="GLOB",
    help="metrics the gate looks at (repeatable glob over metric names; a region's or kernel's row is gated "
    "when any of its statistics matches; a glob that matches no metric both runs have is refused, exit 2; "
    "default: every change the verdict names)",
)
@click.option(
    "--min-effect",
    type=click.FloatRange(min=0),
    callback=finite,
    default=None,
    metavar="PCT",
    help="the noise floor for every metric: a change is called one only when its interval clears ±PCT% "
    "(default: floors per metric family, calibrated from same-code runs)",
)
@click.option(
    "--pool-mixed",
    is_flag=True,
    help="pool runs of different tools, commands or machines into one side (refused by default)",
)
@click.option("--allow-incomplete", is_flag=True, help="compare what exists of incomplete or failed runs")
@click.option(
    "--force",
    is_flag=True,
    help="compare different programs (an engine run against a non-engine run, two scripts; refused by default)",
)
@click.option("--top", type=int, default=25, show_default=True, help="rows in the terminal table")
@store_options
def diff(
    runs,
    vs,
    baseline,
    latest,
    as_json,
    threshold,
    metrics,
    min_effect,
    pool_mixed,
    allow_incomplete,
    force,
    top,
    traces_dir,
    dashboards_dir,
) -> None:
    """Compare runs before (A) with runs after (B): `diff A B`, `diff A1 A2 --vs B1 B2`, `diff --baseline NAME B`.

    A run id (or unique prefix) is that run; a name is every complete run with that name (--latest: its latest
    run), all of one tool, command and machine. Several runs a side are compared with a hierarchical bootstrap
    (runs, then steps inside each run); a change is called one when its interval clears the noise floor."""
    from roseprof.api import diff_runs
    from roseprof.render.console import make_console
    from roseprof.render.terminal_diff import TerminalDiff

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
    with damage_is_one_line(*refs_a, *refs_b):
        view = diff_runs(
            open_store(traces_dir),
            refs_a,
            refs_b,
            threshold,
            list(metrics) or None,
            allow_incomplete,
            latest=latest,
            baseline=baseline,
            min_effect=min_effect,
            pool_mixed=pool_mixed,
            force=force,
        )
    result = view.result
    # The verdict is the product; a dashboard that cannot be written is a warning, not a different exit code.
    result["dashboard"] = None
    try:
        from roseprof.render.diff_dashboard import DiffDashboard  # plotly, which only the dashboards need

        result["dashboard"] = str(DiffDashboard().render(view, view.default_path(dashboards_dir)))
    except ImportError as e:
        warn(f"diff dashboard not written ({e.name} is not installed)")
    except OSError as e:
        warn(f"diff dashboard not written ({os_error(e)})")
    if as_json:
        click.echo(
            json.dumps(
                {k: result[k] for k in ("a", "b", "verdict", "method", "metrics", "kernels", "regressions")},
                indent=1,
            )
        )
    else:
        TerminalDiff(make_console(), top).render(view)
        if result["dashboard"]:
            click.echo(f"dashboard: {result['dashboard']}")
    sys.exit(1 if result["regressions"] else 0)


@cli.group(epilog=EXIT_CODES)
def baseline() -> None:
    """Named baselines: sets of runs kept under a name (in the traces folder) to diff against in CI."""


@baseline.command("set", epilog=EXIT_CODES)
@click.argument("name")
@click.argument("runs", nargs=-1, required=True)
@click.option(
    "--latest", is_flag=True, help="a run name means its latest run only (default: all its complete runs)"
)
@store_options
def baseline_set(name, runs, latest, traces_dir, dashboards_dir) -> None:
    """Keep RUNS (ids, prefixes or names) under NAME, replacing what NAME meant before."""
    from roseprof.api import set_baseline

    entry, found = set_baseline(open_store(traces_dir), name, list(runs), latest)
    click.echo(f"baseline {name}: {len(found)} run(s):")
    _echo_ids(entry["runs"])


@baseline.command("ls", epilog=EXIT_CODES)
@click.option("--json", "as_json", is_flag=True, help="print baselines.json's entries")
@store_options
def baseline_ls(as_json, traces_dir, dashboards_dir) -> None:
    """List the baselines: name, when set, and their runs."""
    from roseprof.run.baselines import read_all

    entries = read_all(open_store(traces_dir))
    if as_json:
        click.echo(json.dumps(entries, indent=1))
        return
    for name, e in sorted(entries.items()):
        click.echo(f"{name}  {e['created_utc']}  {len(e['runs'])} run(s):")
        _echo_ids(e["runs"])
    if not entries:
        click.echo("no baselines (roseprof baseline set NAME RUN...)")


def _echo_ids(run_ids: list[str]) -> None:
    """A baseline's runs, one id a line: a few ids of 25 to 68 characters fit 80 columns no other way, and each can
    be copied whole."""
    for run_id in run_ids:
        click.echo(f"  {run_id}")


@cli.command("open", epilog=EXIT_CODES)
@click.argument("run")
@store_options
def open_(run, traces_dir, dashboards_dir) -> None:
    """Render RUN's dashboard if missing or stale, and open it (or print its path where there is no display)."""
    found = open_store(traces_dir).resolve(run)
    if not found.has_summary():
        raise RoseprofError(f"{found.no_summary()}: nothing to show")
    show_dashboard(found, dashboards_dir, True)
