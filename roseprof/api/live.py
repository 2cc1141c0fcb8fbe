"""`roseprof live URL --steps N`: a load (roseprof load's machinery, api/load.py) and, when it ends, the server's
last N decode steps from its flight recorder (GET /debug/steps), stored as ONE run: the load's files and
summary, the steps' log (raw/steps.jsonl) with its step, ITL and spike figures, and the `live` part, the join of
the two (roseprof/live/join.py). `roseprof request RUN ID` reads the run's log and tokens back."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from roseprof.api.load import command_of, load
from roseprof.errors import RoseprofError
from roseprof.load import runner
from roseprof.load.client import parse_url
from roseprof.load.schedule import Plan
from roseprof.model import Tool, Trace
from roseprof.run import tables
from roseprof.run.store import Run, RunStore
from roseprof.workload.steplog import StepLogRecords, read_steplog

STEPS_FILE = "steps.jsonl"  # in the run's raw/: /debug/steps' body as the server sent it
SERVER_PARTS = ("steps", "itl", "spikes")  # what the steps' analysis adds to the run's summary


def fetch_steps(url: str, last: int, api_key: str | None, timeout_s: float = 60.0) -> bytes:
    """The body of GET URL/debug/steps?last=N; one line when the server has none to give."""
    ep = parse_url(url, api_key)
    address = f"http://{ep.host}:{ep.port}{ep.path('/debug/steps')}?last={last}"
    req = urllib.request.Request(address)
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.read()
    except urllib.error.HTTPError as e:
        why = {401: "the API key was refused (--api-key)", 404: "the server has no flight recorder"}
        raise RoseprofError(f"{address}: HTTP {e.code}: {why.get(e.code, e.reason)}") from None
    except (urllib.error.URLError, OSError) as e:
        raise RoseprofError(f"{address}: cannot be reached ({getattr(e, 'reason', e)})") from None


def live(
    store: RunStore, url: str, steps: int, plan: Plan, opts: runner.LoadOptions, name: str | None = None,
    api_key: str | None = None, **load_options,
) -> Run:  # fmt: skip
    """`load_options`: api/load.load's slo, warmup_s, progress."""
    fetch_steps(url, 0, api_key)  # before any load: the recorder is there and the key is right

    def add_server_side(summary: dict, tokens: list, folder: Path) -> None:
        from roseprof.live.join import join
        from roseprof.live.path import http_path

        path = folder / "raw" / STEPS_FILE
        path.write_bytes(fetch_steps(url, steps, api_key))
        log = read_steplog(str(path))
        if log is None or not log.steps:
            summary["warnings"].append(
                f"the server's flight recorder held no decode step ({url}/debug/steps)"
            )
            return
        summary.update(server_summary(path))
        summary["live"] = part = join(log, tokens)
        start_ns = summary.get("serving", {}).get("clock", {}).get("start_monotonic_ns")
        part["path"] = http_path(log, tokens, start_ns, url)
        older = part["join"]["outside_window"]
        if older:
            summary["warnings"].append(
                f"{older} of the load's {part['join']['tokens']} tokens came from steps older than the server's "
                f"window ({part['window']['steps']} steps): give --steps more, or a shorter load"
            )

    ep = parse_url(url, api_key)
    as_load = command_of(url, plan, load_options.get("slo"), load_options.get("warmup_s", 0.0))
    command = ["roseprof", "live", url, "--steps", str(steps), *as_load[3:]]
    return load(
        store, url, plan, opts, name or f"live-{ep.host}-{ep.port}", api_key=api_key,
        manifest={"live": {"steps": steps}, "command": command}, extra=add_server_side, **load_options,
    )  # fmt: skip


def snapshot(store: RunStore, url: str, steps: int, name: str | None, api_key: str | None) -> Run:
    """No load: the server's last N steps alone, imported as a step log (a run of the `steps` tool)."""
    import tempfile

    from roseprof.api.intake import import_path

    body = fetch_steps(url, steps, api_key)
    ep = parse_url(url, api_key)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / STEPS_FILE
        path.write_bytes(body)
        return import_path(store, str(path), name or f"live-{ep.host}-{ep.port}", None)


def server_summary(path: Path) -> dict:
    """The step, ITL and spike figures of the server's steps, as an import of the log alone makes them."""
    from roseprof.api.sections import analyse_trace

    summary, _ = analyse_trace(Trace(tool=Tool("steps", "?")), path)
    return {k: summary[k] for k in SERVER_PARTS if summary.get(k) is not None}


def read_live(run: Run) -> tuple[StepLogRecords, list[dict]]:
    """A live run's server steps and client tokens; one line when the run is no live run."""
    path = run.path / "raw" / STEPS_FILE
    log = read_steplog(str(path)) if path.is_file() else None
    if log is None or not tables.is_load(run.manifest):
        raise RoseprofError(f"run {run.id} is no `roseprof live` run (it has no server steps)")
    return log, tables.read_load_tokens(run.path)
