"""`roseprof load`: a serving load against a URL, stored as a run of the `load` tool (atomically, as every run:
built in `.tmp-<id>/` and renamed whole). A load stopped by Ctrl-C or by a server that went away keeps the
requests done so far as an `incomplete` run."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from roseprof.capture import environment
from roseprof.errors import RoseprofError
from roseprof.load import metrics_scrape, runner, serving
from roseprof.load import sweep as sweep_mod
from roseprof.load.client import parse_url
from roseprof.load.schedule import Length, Plan
from roseprof.run import tables
from roseprof.run.json_files import read_json, write_json
from roseprof.run.store import Run, RunStore, utc_now

# A load reaching this share of the generator's measured ceiling (requests/s or tokens/s) is warned about: the
# client may be what limits it.
CEILING_SHARE = 0.5
CEILING_FILE = "load-ceiling.json"  # in the traces folder: `roseprof load --measure-ceiling` writes it


class LoadInterrupted(RoseprofError):
    exit_code = 130


OPTION = {"duration_s": "duration"}  # a plan's key -> its option, where they are spelled apart


def command_of(
    url: str, plan: Plan, slo: str | None, warmup_s: float, sweep: str | None = None, repeat: int = 1
) -> list[str]:
    """The load as a command line (what a diff's sides must share to pool: run/alike.py)."""
    cmd = ["roseprof", "load", url]
    for key, value in plan.describe().items():
        if value is not None and key != "dataset" and not (sweep and key == "rate"):
            cmd += [f"--{OPTION.get(key, key.replace('_', '-'))}", str(value)]
    if plan.dataset_path:
        cmd += ["--dataset", plan.dataset_path]
    if slo:
        cmd += ["--slo", slo]
    if warmup_s:
        cmd += ["--warmup", f"{warmup_s:g}"]
    if sweep:
        cmd += ["--sweep", sweep]
    if repeat > 1:
        cmd += ["--repeat", str(repeat)]
    return cmd


def _drive(ep, plan: Plan, opts: runner.LoadOptions, progress) -> tuple[runner.LoadState, str | None]:
    """One load into a LoadState of its own; (state, why it was interrupted or None). Requests cut by an
    interrupt are marked cancelled."""
    state = runner.LoadState()
    interrupted = None
    _interruptible()
    try:
        runner.run_loop(runner.run(ep, plan, opts, state, progress))
    except KeyboardInterrupt:
        interrupted = "interrupted (Ctrl-C)"
    for rec in state.records:  # requests cut by the interrupt
        if rec.end is None:
            rec.status, rec.error, rec.end = "cancelled", "cancelled", rec.sent or state.start
    return state, interrupted


def _part(state: runner.LoadState, plan: Plan, limits: dict, warmup_s: float, url: str) -> dict:
    part = serving.summarise(state.records, state.start, plan.describe(), limits, warmup_s)
    part["model"] = state.model
    part["url"] = url
    server = metrics_scrape.server_ttft(state.metrics)
    part["server"] = {"metrics_url": state.metrics_url, "scrapes": len(state.metrics), "ttft": server}
    part["clock"] = {"start_monotonic_ns": state.start_monotonic_ns}  # the load's t0 on the server's clock
    lags = state.loop_lags_ms
    part["client_loop"] = {"stalls": len(lags), "max_stall_ms": max(lags) if lags else 0.0}
    return part


def load(
    store: RunStore,
    url: str,
    plan: Plan,
    opts: runner.LoadOptions,
    name: str | None = None,
    slo: str | None = None,
    warmup_s: float = 0.0,
    api_key: str | None = None,
    progress: Callable[[dict], None] | None = None,
    manifest: dict | None = None,
    sweep: str | None = None,
    repeat: int = 1,
    saturate: int | None = None,
    extra: Callable[[dict, list, Path], None] | None = None,
) -> Run:
    """Run the load and store it. Bad input (options, the URL) is refused before anything is sent; an
    unreachable server stores nothing (no request was made). `extra(summary, tokens, run folder)`: what a caller
    adds to the run before it is written (roseprof live: the server's steps); the caller's `manifest` may say
    another command.

    `sweep` (`--sweep RATES|auto`: load/sweep.py) runs one open-loop load per rate; `repeat` K runs the plan (each
    rate of a sweep) K times. Either is stored as one run whose summary has `loads` instead of `serving`: {"kind": "sweep" |
    "repeat", "parts": [each load's serving part], and for a sweep "curve", "knee" and (auto) "probes"}, its
    tokens table's rows each naming their load ("load": k). A sweep's diff compares rate with rate, a repeat's
    takes its K loads as K runs of a group (api/compare.load_samples)."""
    if repeat < 1:
        raise RoseprofError(f"--repeat {repeat}: at least 1")
    if sweep:
        plan = _sweep_plan(plan, sweep)
    plan.check()
    limits = serving.parse_slo(slo)
    ep = parse_url(url, api_key)
    probes: list[dict] = []
    if sweep:
        rates = sweep_mod.parse_rates(sweep)
        if rates is None:  # auto
            probes = _probe(ep, plan, opts, progress, saturate or sweep_mod.AUTO_SATURATE)
            rates = sweep_mod.auto_rates(probes[0]["requests_s"], probes[1]["requests_s"])
        plans = [replace(plan, rate=r) for r in rates for _ in range(repeat)]
    else:
        plans = [plan] * repeat
    states, interrupted, stopped = _drive_all(ep, plans, opts, progress)
    parts = [_part(state, one, limits, warmup_s, url) for state, one in states]
    several = bool(sweep) or len(plans) > 1  # a sweep of one rate is still a sweep (its diff, its curve)
    warnings = []
    for k, ((state, _), part) in enumerate(zip(states, parts)):
        label = f"{load_label(part, k, repeat, bool(sweep))}: " if several else ""
        last = k == len(states) - 1
        warnings += [label + w for w in _warnings(part, store, state, interrupted if last else None)]
    if several and stopped and not interrupted and not any(s.stopped == stopped for s, _ in states):
        warnings.append(stopped)
    summary = {"regions": [], "kernels": [], "warnings": warnings}
    tokens, metrics = [], []
    for k, (state, _) in enumerate(states):
        rows = serving.token_table(state.records, state.start)
        tokens += [{**row, "load": k} for row in rows] if several else rows
        metrics += [{**m, "load": k} for m in state.metrics] if several else state.metrics
    if not several:
        summary["serving"] = parts[0]
    else:
        summary["loads"] = {"kind": "sweep" if sweep else "repeat", "parts": parts, "repeat": repeat}
        if sweep:
            curve = sweep_mod.curve(parts)
            summary["loads"].update(curve=curve, knee=sweep_mod.knee(curve), probes=probes)
    writer = store.new_run(name or f"load-{ep.host}-{ep.port}", tables.LOAD_TOOL)
    try:
        writer.manifest.update(
            {
                "command": command_of(url, plan, slo, warmup_s, sweep, repeat)
                + (["--concurrency", str(saturate)] if saturate and probes else []),
                "environment": environment.describe(),
                **(manifest or {}),
            }
        )  # the caller's manifest may say another command (roseprof live)
        writer.manifest["tool"] = {"name": tables.LOAD_TOOL, "version": "1", "url": url}
        if extra is not None:
            extra(summary, tokens, writer.path)
        tables.write_load(writer.path, summary, tokens, metrics)
        run = writer.finish("incomplete" if stopped else "complete", exit_code=130 if interrupted else 0,
                            message=stopped)  # fmt: skip
    except BaseException:
        writer.abort()
        raise
    if interrupted:
        kept = sum(len(s.records) for s, _ in states)
        raise LoadInterrupted(f"interrupted: {kept} requests kept as run {run.id} (incomplete)")
    return run


def load_label(part: dict, k: int, repeat: int, sweep: bool) -> str:
    """A load of several in words: `at 10 req/s`, `load 2`, `at 10 req/s, load 2 of 3`."""
    if not sweep:
        return f"load {k + 1}"
    at = f"at {part['plan']['rate']:g} req/s"
    return at if repeat == 1 else f"{at}, load {k % repeat + 1} of {repeat}"


def _sweep_plan(plan: Plan, sweep: str) -> Plan:
    """The plan a sweep's loads share (open loop: each takes its rate), the options refused in one line."""
    rates = sweep_mod.parse_rates(sweep)
    if plan.rate is not None:
        raise RoseprofError("--sweep gives the rates: drop --rate")
    if rates is not None and plan.concurrency is not None:
        raise RoseprofError(
            "--sweep RATES is open loop: drop --concurrency (with --sweep auto it sets the probe's)"
        )
    return replace(plan, rate=rates[0] if rates else 1.0, concurrency=None)


def _probe(ep, plan: Plan, opts, progress, saturate: int) -> list[dict]:
    """--sweep auto's two closed-loop probes (one request at a time, then `saturate` at a time): what each
    completed per second. Nothing is stored of them but these figures."""
    probes = []
    for conc in (1, saturate):
        probe = replace(plan, rate=None, concurrency=conc)
        state, interrupted = _drive(ep, probe, opts, progress)
        if state.start is None or interrupted:
            raise LoadInterrupted("interrupted while --sweep auto probed the server: no run stored")
        got = serving.summarise(state.records, state.start, probe.describe(), {})
        tp = got["throughput"]
        probes.append({"concurrency": conc, "requests_s": tp["requests_s"], "output_tok_s": tp["output_tok_s"],
                       "completed": got["completed"]})  # fmt: skip
    return probes


def _interruptible() -> None:
    """SIGINT ends a load however it was started. A process a non-interactive shell starts in the background (a CI
    script's `cmd &`, nohup) inherits SIGINT ignored and Python leaves it so: `kill -INT` or `timeout -s INT` would
    then not stop the load and keep what it did. Python's own handler makes it a KeyboardInterrupt, as at a terminal."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _drive_all(ep, plans: list[Plan], opts, progress) -> tuple[list, str | None, str | None]:
    """The loads one after the other: ([(state, plan)] of those that started, why interrupted, why stopped early).
    A load that cannot start (the server gone) after others ran stops the series and keeps them; the first one
    raises (nothing was sent)."""
    states: list[tuple[runner.LoadState, Plan]] = []
    interrupted = stopped = None
    for one in plans:
        try:
            state, interrupted = _drive(ep, one, opts, progress)
        except RoseprofError as e:
            if not states:
                raise
            stopped = f"{e}: {len(states)} of {len(plans)} loads ran"
            break
        if state.start is None:  # interrupted in the preflight: nothing of it was sent
            if not states:
                raise LoadInterrupted("interrupted before the load started: no run stored")
            break
        states.append((state, one))
        if interrupted or state.stopped:
            stopped = interrupted or state.stopped
            break
    if not stopped and len(states) < len(plans):
        stopped = interrupted or f"{len(states)} of {len(plans)} loads ran"
    return states, interrupted, interrupted or stopped


CLIENT_STALL_WARN_MS = 20.0  # a client loop stall this long is said in the run (runner._watch_loop)


def _warnings(part: dict, store: RunStore, state: runner.LoadState, interrupted: str | None) -> list[str]:
    out = []
    if interrupted:
        out.append(f"{interrupted}: the requests done so far are kept; those in flight are marked cancelled")
    if state.stopped:
        out.append(state.stopped)
    errors = part["errors"]
    if errors:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(errors.items()))
        out.append(f"{sum(errors.values())} of {part['count']} requests failed ({kinds})")
    sched = part["schedule"]
    if sched["behind"]:
        out.append(
            f"the generator fell behind its schedule (p99 lag {sched['lag_p99_ms']:.1f} ms): the arrivals asked "
            "were not the arrivals sent"
        )
    loop = part["client_loop"]
    if loop["max_stall_ms"] >= CLIENT_STALL_WARN_MS:
        out.append(
            f"the client's own event loop stalled {loop['stalls']} time(s), up to {loop['max_stall_ms']:.0f} ms "
            "(a busy machine, or the generator's own work): tokens read then are stamped late by up to that"
        )
    ceiling = read_ceiling(store)
    part["generator_ceiling"] = ceiling
    if ceiling:
        tp = part["throughput"]
        share = max(tp["requests_s"] / ceiling["requests_s"], tp["output_tok_s"] / ceiling["output_tok_s"])
        if share >= CEILING_SHARE:
            out.append(
                f"this load reached {100 * share:.0f}% of the generator's own ceiling ({ceiling['requests_s']:,.0f} "
                f"req/s, {ceiling['output_tok_s']:,.0f} tok/s): the client may be the bottleneck"
            )
    return out


def read_ceiling(store: RunStore) -> dict | None:
    path = store.root / CEILING_FILE
    try:
        found = read_json(path)
    except (OSError, ValueError):
        return None
    ok = isinstance(found, dict) and all(
        isinstance(found.get(k), (int, float)) and found[k] > 0 for k in ("requests_s", "output_tok_s")
    )
    return found if ok else None


def measure_ceiling(
    store: RunStore, requests: int = 2000, concurrency: int = 64, output_len: int = 64
) -> dict:
    """The generator's own ceiling: a closed-loop load against the stub (roseprof/load/stub.py, in a process of
    its own so that it takes no time from the client's core) that streams every token at once; the requests/s and
    output tokens/s the client took in, kept in the traces folder, which every later load compares itself with."""
    import subprocess
    import sys

    stub = subprocess.Popen(
        [sys.executable, "-m", "roseprof.load.stub", "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        line = stub.stdout.readline()
        if "ready at" not in line:
            raise RoseprofError("the stub server for --measure-ceiling did not start")
        url = line.split("ready at ")[1].strip()
        plan = Plan(requests=requests, concurrency=concurrency, output_len=Length(output_len, output_len),
                    prompt_len=Length(8, 8))  # fmt: skip
        state = runner.LoadState()
        runner.run_loop(runner.run(parse_url(url), plan, runner.LoadOptions(scrape=False), state))
        part = serving.summarise(state.records, state.start, plan.describe(), {})
    finally:
        stub.terminate()
        stub.wait(10)
    if part["completed"] != requests:
        raise RoseprofError(
            f"--measure-ceiling: only {part['completed']} of {requests} stub requests completed"
        )
    found = {
        "requests_s": part["throughput"]["requests_s"],
        "output_tok_s": part["throughput"]["output_tok_s"],
        "concurrency": concurrency,
        "output_len": output_len,
        "requests": requests,
        "measured_utc": utc_now(),
        "environment": {k: v for k, v in environment.describe().items() if k in ("host", "cpu", "python")},
    }
    store.root.mkdir(parents=True, exist_ok=True)
    write_json(store.root / CEILING_FILE, found)
    return {**found, "path": str(store.root / CEILING_FILE)}
