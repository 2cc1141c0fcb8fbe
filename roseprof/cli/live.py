"""`roseprof live URL --steps N`: a load and the server's last N decode steps as one run (roseprof/api/live.py);
`roseprof request RUN ID`: one request's timeline in such a run."""

from __future__ import annotations

import click

from roseprof.cli.common import EXIT_CODES, after_storing, cli, open_store, print_run, store_options
from roseprof.cli.load import EXIT, load_options, plan_of, show_stored_load
from roseprof.workload.roseinfer import WINDOW_TOOLS


@cli.command(epilog=EXIT)
@click.argument("url")
@click.option("--steps", type=click.IntRange(min=1), required=True,
              help="without a window: the server's last N decode steps (its flight recorder) when the load "
                   "ends, of which the run analyses the load's own; with a window (--tool torch|nsys, or steps on a "
                   "server with --enable-profiling): the window's N steps, and the run analyses every step of the "
                   "load the recorder holds; with no load: the last N steps, or the window's")  # fmt: skip
@click.option("--tool", type=click.Choice(list(WINDOW_TOOLS)), default="steps", show_default=True,
              help="what records the server side (steps: the flight recorder, no profiler; on a server started with "
                   "--enable-profiling a steps window of N steps from the load's start, its regions timed; torch: a torch.profiler "
                   "window of N steps, on a server started with --enable-profiling; nsys: an Nsight Systems window, "
                   "on such a server started under roseprof nsys --capture-range nvtx --capture-range-end repeat)")  # fmt: skip
@click.option("--name", help="a name for the run (default: live-HOST-PORT)")
@load_options
@store_options
def live(url, steps, tool, name, n_requests, duration, rate, concurrency, arrivals, burstiness, prompt_len,
         output_len, dataset, seed, warmup, slo, model, api_key, stall_s, no_ignore_eos, no_metrics, traces_dir,
         dashboards_dir) -> None:  # fmt: skip
    """Load a roseinfer server (URL: http://HOST:PORT) as `roseprof load` does and store, in the same run, its
    last N decode steps (GET /debug/steps), each client token joined to the step that emitted it. The run's step
    figures (decode steps, ITL, spikes, the slowest requests) cover the load's own steps only: from its first
    decode token's step to its last's, their ITL, spike and rollover figures the load's own tokens (another
    client's requests shared the steps, not the figures); a long-running server's recorder also holds other
    loads' steps, which the run's raw/steps.jsonl keeps and `show` counts as left out. A load of no decode token
    (--output-len 1) has no step: its TTFT lines still say queued vs prefill. `show` starts with the slowest requests and the step that
    made each slow; `roseprof request RUN ID` shows one. With neither --requests nor --duration, no load: the
    server's last N steps alone (as `roseprof import` of them).

    --tool steps on a server started with --enable-profiling: a steps window of N decode steps, opened as the load
    starts, times each region of its steps (no profiler), so the run names the region that made a step slow.

    --tool torch: a torch.profiler window of N decode steps on the server (roseinfer serve --enable-profiling),
    opened once the load is steady and closed after N steps or when the load ends; the run then also holds the
    window's regions and kernels (CPU operators on a CPU engine), each of its steps' top ones, and the pause the
    window's export cost the engine loop; a token whose gap holds the window's start or close is put down to the
    profiler (said once beside the slowest requests, each ranked by its worst gap that is not the profiler's)
    and left out of the ITL figures. The step figures cover the load's steps that the
    flight recorder still holds (--flight-recorder-steps), not only the window's. --tool nsys: the same with Nsight Systems, on a server started under
    `roseprof nsys --capture-range nvtx --capture-range-end repeat -- roseinfer serve MODEL --enable-profiling`
    (it records only inside windows); each window is one nsys report. With no load, the window opens at once on
    what the server serves (Ctrl-C ends it early) and its trace is imported with the window's steps.

    A tensor-parallel server (--tensor-parallel-size): the window is on every rank over the same steps, and the run
    holds every rank (each rank's trace and step log). Its flight recorder is rank 0's, so --tool steps takes a
    steps window on every rank where the server has --enable-profiling (else rank 0's steps, with a warning)."""
    from roseprof.api.live import live as run_live
    from roseprof.api.live import snapshot, window_snapshot
    from roseprof.render.load_progress import LoadProgress

    if n_requests is None and duration is None:  # no load: the server's steps alone
        from roseprof.render.console import make_console

        store = open_store(traces_dir)
        if tool == "steps":
            run = snapshot(store, url, steps, name, api_key)
        else:
            run = window_snapshot(store, url, steps, tool, name, api_key)
        after_storing(run, lambda: print_run(make_console(), run))
        return
    plan, opts = plan_of(n_requests, duration, rate, concurrency, arrivals, burstiness, prompt_len, output_len,
                         dataset, seed, model, stall_s, no_ignore_eos, no_metrics)  # fmt: skip
    store = open_store(traces_dir)
    progress = LoadProgress(planned=n_requests)
    try:
        run = run_live(
            store,
            url,
            steps,
            plan,
            opts,
            name,
            api_key,
            tool,
            slo=slo,
            warmup_s=warmup,
            progress=progress.callback(),
        )
    finally:
        progress.finish()
    show_stored_load(run)


@cli.command(epilog=EXIT_CODES)
@click.argument("run_ref", metavar="RUN")
@click.argument("request_id", metavar="ID")
@store_options
def request(run_ref, request_id, traces_dir, dashboards_dir) -> None:
    """One request of a `roseprof live` run: queued, prefill, then each token with its decode step, the step's
    batch size and wall time, and where a torch window recorded the step, its top kernels and regions. ID: the
    server's response id (cmpl-...), or the request's index in the load."""
    from roseprof.api.live import read_live
    from roseprof.live.timeline import timeline

    run = open_store(traces_dir).resolve(run_ref)
    log, tokens, detail = read_live(run)
    for line in timeline(log, tokens, request_id, detail):
        click.echo(line)
