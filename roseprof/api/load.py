"""`roseprof load`: a serving load against a URL, stored as a run of the `load` tool (atomically, as every run:
built in `.tmp-<id>/` and renamed whole). A load stopped by Ctrl-C or by a server that went away keeps the
requests done so far as an `incomplete` run."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from roseprof.capture import environment
from roseprof.errors import RoseprofError
from roseprof.load import metrics_scrape, runner, serving
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


def command_of(url: str, plan: Plan, slo: str | None, warmup_s: float) -> list[str]:
    """The load as a command line (what a diff's sides must share to pool: run/alike.py)."""
    cmd = ["roseprof", "load", url]
    for key, value in plan.describe().items():
        if value is not None and key != "dataset":
            cmd += [f"--{key.replace('_', '-')}", str(value)]
    if plan.dataset_path:
        cmd += ["--dataset", plan.dataset_path]
    if slo:
        cmd += ["--slo", slo]
    if warmup_s:
        cmd += ["--warmup", f"{warmup_s:g}"]
    return cmd


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
    extra: Callable[[dict, list, Path], None] | None = None,
) -> Run:
    """Run the load and store it. Bad input (options, the URL) is refused before anything is sent; an
    unreachable server stores nothing (no request was made). `extra(summary, tokens, run folder)`: what a caller
    adds to the run before it is written (roseprof live: the server's steps)."""
    plan.check()
    limits = serving.parse_slo(slo)
    ep = parse_url(url, api_key)
    state = runner.LoadState()
    interrupted = None
    try:
        asyncio.run(runner.run(ep, plan, opts, state, progress))
    except KeyboardInterrupt:
        interrupted = "interrupted (Ctrl-C)"
    if state.start is None:  # the preflight failed (raised above) or was interrupted: nothing was sent
        raise LoadInterrupted("interrupted before the load started: no run stored")
    for rec in state.records:  # requests cut by the interrupt
        if rec.end is None:
            rec.status, rec.error, rec.end = "cancelled", "cancelled", rec.sent or state.start
    part = serving.summarise(state.records, state.start, plan.describe(), limits, warmup_s)
    part["model"] = state.model
    part["url"] = url
    server = metrics_scrape.server_ttft(state.metrics)
    part["server"] = {"metrics_url": state.metrics_url, "scrapes": len(state.metrics), "ttft": server}
    warnings = _warnings(part, store, state, interrupted)
    summary = {"regions": [], "kernels": [], "serving": part, "warnings": warnings}
    writer = store.new_run(name or f"load-{ep.host}-{ep.port}", tables.LOAD_TOOL)
    try:
        writer.manifest.update(
            {
                "command": command_of(url, plan, slo, warmup_s),
                "environment": environment.describe(),
                **(manifest or {}),
            }
        )  # the caller's manifest may say another command (roseprof live)
        writer.manifest["tool"] = {"name": tables.LOAD_TOOL, "version": "1", "url": url}
        tokens = serving.token_table(state.records, state.start)
        if extra is not None:
            extra(summary, tokens, writer.path)
        tables.write_load(writer.path, summary, tokens, state.metrics)
        stopped = interrupted or state.stopped
        run = writer.finish("incomplete" if stopped else "complete", exit_code=130 if interrupted else 0,
                            message=stopped)  # fmt: skip
    except BaseException:
        writer.abort()
        raise
    if interrupted:
        raise LoadInterrupted(f"interrupted: {len(state.records)} requests kept as run {run.id} (incomplete)")
    return run


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
        asyncio.run(runner.run(parse_url(url), plan, runner.LoadOptions(scrape=False), state))
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
