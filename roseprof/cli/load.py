"""`roseprof load URL`: a serving load whose result is a run (the library: roseprof/api/load.py)."""

from __future__ import annotations

import math
import sys

import click

from roseprof.cli.common import after_storing, cli, open_store, print_run, store_options, warn
from roseprof.errors import RoseprofError

EXIT = (
    "Exit codes: 0 every request completed; 1 the run is stored but some requests failed (or a sweep or repeat "
    "stopped early); 2 bad input, or the URL "
    "cannot be reached (nothing stored); 130 interrupted (the requests done so far are kept as an incomplete run)."
)


def _rate(ctx, param, value):
    if value is None:
        return None
    try:
        rate = float(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is no rate (requests/s, or inf)") from None
    if math.isnan(rate) or rate <= 0:
        raise click.BadParameter(f"{value!r}: a rate is > 0 (or inf)")
    return rate


_LOAD_OPTIONS = [
    click.option("--requests", "n_requests", type=click.IntRange(min=1), help="send this many requests"),
    click.option(
        "--duration", type=click.FloatRange(min=0, min_open=True), help="send for this many seconds"
    ),
    click.option("--rate", callback=_rate, help="open loop: requests/s on average (inf: all at once)"),
    click.option(
        "--concurrency", type=click.IntRange(min=1), help="closed loop: this many requests in flight"
    ),
    click.option("--arrivals", type=click.Choice(["poisson", "gamma"]), default="poisson", show_default=True),
    click.option(
        "--burstiness",
        type=click.FloatRange(min=0, min_open=True),
        default=1.0,
        show_default=True,
        help="gamma arrivals' shape (1: Poisson; below 1: burstier)",
    ),
    click.option(
        "--prompt-len", default="32", show_default=True, help="prompt tokens: N or LOW-HIGH (uniform)"
    ),
    click.option(
        "--output-len", default="64", show_default=True, help="output tokens: N or LOW-HIGH (uniform)"
    ),
    click.option(
        "--dataset",
        type=click.Path(dir_okay=False),
        help='a JSONL file of prompts: {"prompt": ..., "output_len": N}',
    ),
    click.option(
        "--seed", type=int, default=0, show_default=True, help="the same seed: the same schedule and lengths"
    ),
    click.option(
        "--warmup",
        type=click.FloatRange(min=0),
        default=0.0,
        show_default=True,
        help="seconds at the start whose requests count in no figure",
    ),
    click.option("--slo", help="goodput's limits, e.g. ttft=200ms,tpot=5ms,e2e=2s"),
    click.option("--model", help="the model to ask for (default: the server's first, /v1/models)"),
    click.option("--api-key", envvar="ROSEPROF_LOAD_API_KEY", help="Bearer key (env ROSEPROF_LOAD_API_KEY)"),
    click.option(
        "--timeout",
        "stall_s",
        type=click.FloatRange(min=0, min_open=True),
        default=30.0,
        show_default=True,
        help="a request with no byte from the server for this many seconds fails (timeout)",
    ),
    click.option("--no-ignore-eos", is_flag=True, help="do not ask the server to ignore EOS"),
    click.option("--no-metrics", is_flag=True, help="do not scrape the server's /metrics"),
]


def load_options(f):
    """The options of a load (roseprof load, roseprof live)."""
    for option in reversed(_LOAD_OPTIONS):
        f = option(f)
    return f


@cli.command(epilog=EXIT)
@click.argument("url")
@click.option("--name", help="a name for the run (default: load-HOST-PORT)")
@load_options
@click.option(
    "--sweep", help="one load per rate: RATE,RATE,... (requests/s) or auto (found up to saturation)"
)
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="K loads of the same schedule (of each rate, with --sweep) in one run; a diff takes them as K runs")  # fmt: skip
@click.option("--measure-ceiling", is_flag=True,
              help="measure the generator's own ceiling against a stub that streams instantly, and keep it")  # fmt: skip
@store_options
def load(url, name, n_requests, duration, rate, concurrency, arrivals, burstiness, prompt_len, output_len, dataset,
         seed, warmup, slo, model, api_key, stall_s, no_ignore_eos, no_metrics, sweep, repeat, measure_ceiling,
         traces_dir, dashboards_dir) -> None:  # fmt: skip
    """Load an OpenAI-compatible server (URL: http://HOST:PORT) with streamed /v1/completions and store the
    result as a run: per request TTFT, TPOT, ITL and E2E on the client's clock, goodput against --slo, the
    server's /metrics. `roseprof show|diff|open|export` work on it. URL `ceiling` with --measure-ceiling
    measures the generator itself."""
    from roseprof.api.load import load as run_load
    from roseprof.api.load import measure_ceiling as run_ceiling
    from roseprof.render.load_progress import LoadProgress

    store = open_store(traces_dir)
    if measure_ceiling:
        found = run_ceiling(store)
        click.echo(
            f"generator ceiling: {found['requests_s']:,.0f} req/s, {found['output_tok_s']:,.0f} output tok/s "
            f"(stub streaming {found['output_len']} tokens instantly, {found['concurrency']} concurrent); "
            f"kept in {found['path']}"
        )
        return
    plan, opts = plan_of(n_requests, duration, rate, concurrency, arrivals, burstiness, prompt_len, output_len,
                         dataset, seed, model, stall_s, no_ignore_eos, no_metrics)  # fmt: skip
    progress = LoadProgress(planned=n_requests)
    try:
        run = run_load(store, url, plan, opts, name, slo, warmup, api_key, progress.callback(), sweep=sweep, repeat=repeat,
                       saturate=concurrency)  # fmt: skip
    finally:
        progress.finish()
    show_stored_load(run)


def show_stored_load(run) -> None:
    """A load's run in the terminal; exit 1 where some requests failed (EXIT)."""
    from roseprof.render.console import make_console

    after_storing(run, lambda: print_run(make_console(), run))
    summary = run.summary()
    parts = summary["loads"]["parts"] if "loads" in summary else [summary["serving"]]
    failed = sum(sum(p["errors"].values()) for p in parts)
    if failed:
        warn(f"{failed} of {sum(p['count'] for p in parts)} requests failed; the run {run.id} is stored")
        sys.exit(1)
    if run.manifest.get("status") == "incomplete":  # a sweep or repeat cut short by the server
        warn(f"{run.manifest.get('message') or 'stopped early'}; the run {run.id} is stored (incomplete)")
        sys.exit(1)


def plan_of(n_requests, duration, rate, concurrency, arrivals, burstiness, prompt_len, output_len, dataset, seed,
            model, stall_s, no_ignore_eos, no_metrics):  # fmt: skip
    """The load's Plan and LoadOptions from its options (load_options)."""
    from roseprof.load.runner import LoadOptions
    from roseprof.load.schedule import Plan, parse_length, read_dataset

    if (n_requests is None) == (duration is None):
        raise RoseprofError("give --requests N or --duration S (one of them)")
    plan = Plan(
        seed=seed,
        requests=n_requests,
        duration_s=duration,
        rate=rate,
        concurrency=concurrency,
        arrivals=arrivals,
        burstiness=burstiness,
        prompt_len=parse_length(prompt_len, "--prompt-len"),
        output_len=parse_length(output_len, "--output-len"),
        dataset=read_dataset(dataset) if dataset else (),
        dataset_path=dataset,
    )
    opts = LoadOptions(stall_s=stall_s, ignore_eos=not no_ignore_eos, model=model, scrape=not no_metrics)
    return plan, opts
