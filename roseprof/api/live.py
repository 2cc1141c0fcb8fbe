"""`roseprof live URL --steps N`: a load (roseprof load's machinery, api/load.py) and, when it ends, the server's
last N decode steps from its flight recorder (GET /debug/steps), stored as ONE run: the load's files and
summary, the steps' log (raw/steps.jsonl) with its step, ITL and spike figures, and the `live` part, the join of
the two (roseprof/live/join.py). `roseprof request RUN ID` reads the run's log and tokens back.

`--tool torch`: a capture window of N decode steps (roseinfer serve --enable-profiling; roseprof/live/window.py)
opened once the load is steady (its first token came back, --warmup has passed, requests are in flight), closed
when it has its N steps or the load ends; its files (raw/window/: the window's step log and Kineto trace) are read
by the torch driver and analysed with the window's steps, so the run also holds the window's regions, kernels and
operators, each window step's top kernels and regions (live/step_detail.py, by the engine's step number), and the
pause the export cost the engine loop. The join itself stays the flight recorder's: every token of the load has
its step, the window's steps have more.

`--tool nsys`: the same on a server run under `roseprof nsys --capture-range nvtx --capture-range-end repeat`; the
window's file is nsys' stream of its recording range (trace.qdstrm), which roseprof imports and exports to SQLite
here (drivers/nsys/window_stream.py) and the nsys driver reads: regions, and on a GPU kernels."""

from __future__ import annotations

import threading
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
from roseprof.run.json_files import read_json
from roseprof.run.store import Run, RunStore
from roseprof.workload.roseinfer import WINDOW_NSYS_FILE, WINDOW_STEPS_FILE, WINDOW_TRACE_FILE
from roseprof.workload.steplog import StepLogRecords, read_steplog

STEPS_FILE = "steps.jsonl"  # in the run's raw/: /debug/steps' body as the server sent it
SERVER_PARTS = ("steps", "itl", "spikes")  # what the steps' analysis adds to the run's summary
WINDOW_DIR = "window"  # in the run's raw/: a capture window's files as the server sent them
WINDOW_PARTS = (
    "regions",
    "kernels",
    "operators",
)  # what a window's trace adds to the run's summary (operators: torch)
RECORDER_ALL = 1 << 30  # /debug/steps?last=: all the recorder keeps (the server gives at most that)


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
    api_key: str | None = None, tool: str = "steps", **load_options,
) -> Run:  # fmt: skip
    """`load_options`: api/load.load's slo, warmup_s, progress."""
    fetch_steps(url, 0, api_key)  # before any load: the recorder is there and the key is right
    opener = None
    if tool != "steps":
        from roseprof.live.window import WindowClient

        client = WindowClient(url, api_key)
        client.status()  # before any load: profiling is on (else the server's one line: --enable-profiling)
        opener = SteadyOpener(client, tool, steps, load_options.get("warmup_s", 0.0))
        load_options["progress"] = opener.wrap(load_options.get("progress"))

    def add_server_side(summary: dict, tokens: list, folder: Path) -> None:
        from roseprof.live.join import join
        from roseprof.live.path import http_path

        path = folder / "raw" / STEPS_FILE
        path.write_bytes(fetch_steps(url, steps if opener is None else RECORDER_ALL, api_key))
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
        if opener is not None:
            add_window(summary, folder, opener)
        older = part["join"]["outside_window"]
        if older:
            summary["warnings"].append(
                f"{older} of the load's {part['join']['tokens']} tokens came from steps older than the server's "
                f"window ({part['window']['steps']} steps): "
                + ("give --steps more, or a shorter load" if opener is None else "a shorter load, or a server "
                   "started with a larger --flight-recorder-steps")
            )  # fmt: skip

    ep = parse_url(url, api_key)
    as_load = command_of(url, plan, load_options.get("slo"), load_options.get("warmup_s", 0.0))
    command = [
        "roseprof",
        "live",
        url,
        "--steps",
        str(steps),
        *(["--tool", tool] if opener else []),
        *as_load[3:],
    ]
    return load(
        store, url, plan, opts, name or f"live-{ep.host}-{ep.port}", api_key=api_key,
        manifest={"live": {"steps": steps, "tool": tool}, "command": command}, extra=add_server_side,
        **load_options,
    )  # fmt: skip


class SteadyOpener:
    """Opens the window once the load is steady, from the load's progress reports (every 0.5 s, on the load's
    event loop: the POST goes on a thread of its own, so the client's timing never waits on it)."""

    def __init__(self, client, tool: str, steps: int, warmup_s: float) -> None:
        self.client, self.tool, self.steps, self.warmup_s = client, tool, steps, warmup_s
        self.thread: threading.Thread | None = None
        self.error: str | None = None

    def wrap(self, progress):
        def report(figures: dict) -> None:
            steady = figures.get("ttft_p50_ms") is not None and figures.get("in_flight", 0) > 0
            if self.thread is None and steady and figures.get("elapsed_s", 0.0) >= self.warmup_s:
                self.thread = threading.Thread(target=self._open, name="roseprof-window", daemon=True)
                self.thread.start()
            if progress is not None:
                progress(figures)

        return report

    def _open(self) -> None:
        try:
            self.client.start(self.tool, self.steps)
        except RoseprofError as e:
            self.error = str(e)


def add_window(summary: dict, folder: Path, opener: SteadyOpener) -> None:
    """The window's files into raw/window/, its analysis and each step's detail into the run's summary."""
    from roseprof.live.step_detail import step_detail, words

    part = summary["live"]
    if opener.thread is None:
        summary["warnings"].append(
            f"the load ended before it was steady: no {opener.tool} window was opened (a longer load, or less --warmup)"
        )
        return
    opener.thread.join()
    if opener.error:
        summary["warnings"].append(f"the {opener.tool} window was not opened: {opener.error}")
        return
    window = opener.client.wait_closed(stop=True)
    files = opener.client.fetch(window, folder / "raw" / WINDOW_DIR)
    part["capture"] = {
        "tool": window["tool"], "asked": window["steps"], "steps": window["steps_done"],
        "first_step": window["first_step"], "stopped_early": window["stopped_early"], "pause": window["pause"],
    }  # fmt: skip
    if window["stopped_early"]:
        summary["warnings"].append(
            f"the {window['tool']} window closed early: the load ended after {window['steps_done']} of its "
            f"{window['steps']} steps"
        )
    steps_path = files.get(WINDOW_STEPS_FILE)
    if steps_path is None or not window["steps_done"]:
        return
    from roseprof.api.sections import analyse_trace

    trace = window_trace(files, folder / "raw", opener.client)
    if trace is None:
        return
    analysed, tables_of = analyse_trace(trace, steps_path)
    summary.update({k: analysed[k] for k in WINDOW_PARTS if analysed.get(k) is not None})
    log = read_steplog(str(steps_path))
    first = int(log.meta.get("first_step", window["first_step"])) if log is not None else window["first_step"]
    detail = step_detail(trace, tables_of.get("steps.rows"), first)
    part["step_detail"] = detail
    last = window["first_step"] + window["steps_done"] - 1
    stop_ms = window["pause"].get("stop_ms") or 0.0
    for entry in part["slowest"]:
        said = words(detail.get(str(entry["step"])))
        if said:
            entry["detail"] = said
            entry["line"] += f" [{said}]"
        # The close runs after the last step, holding the GIL: that step's tokens (not yet sent by the core's
        # outbox thread) or the next step's wait for it.
        if entry["by"] == "itl" and entry["step"] in (last, last + 1):
            entry["line"] += (
                f" (the {window['tool']} window closed after step {last}: {stop_ms:.0f} ms on the loop)"
            )


def window_trace(files: dict[str, Path], raw: Path, client) -> Trace | None:
    """A closed window's trace read into the model (torch: its Kineto trace; nsys: the report made from its
    recording range's stream); None for a window of steps alone."""
    if WINDOW_TRACE_FILE in files:
        from roseprof.drivers.torch.reader import read_kineto

        return read_kineto(
            files[WINDOW_TRACE_FILE], raw, client.address(f"/profile/files/{WINDOW_TRACE_FILE}")
        )
    if WINDOW_NSYS_FILE in files:
        from roseprof.drivers.nsys.window_stream import read_stream

        trace, _ = read_stream(files[WINDOW_NSYS_FILE], client.address(f"/profile/files/{WINDOW_NSYS_FILE}"))
        return trace
    return None


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


def window_snapshot(
    store: RunStore, url: str, steps: int, tool: str, name: str | None, api_key: str | None
) -> Run:
    """No load: a window of N steps opened at once on what the server is serving, waited for (Ctrl-C ends it
    early), its files imported as a run: the trace with the window's step log (torch), or the step log alone."""
    import tempfile

    from roseprof.api.intake import import_path
    from roseprof.live.window import WindowClient

    client = WindowClient(url, api_key)
    client.start(tool, steps)
    try:
        window = client.wait_closed(stop=False, wait_s=float("inf"))
    except KeyboardInterrupt:
        window = client.wait_closed(stop=True)
    ep = parse_url(url, api_key)
    with tempfile.TemporaryDirectory() as tmp:
        files = client.fetch(window, Path(tmp))
        if not window["steps_done"]:
            raise RoseprofError(f"{client.address('/profile/status')}: the window closed with no decode step")
        steps_path = str(files[WINDOW_STEPS_FILE])
        trace = files.get(WINDOW_TRACE_FILE)
        if WINDOW_NSYS_FILE in files:  # the report made from nsys' stream, which an import exports again
            from roseprof.drivers.nsys.window_stream import nsys_here, report_of_stream

            label = client.address(f"/profile/files/{WINDOW_NSYS_FILE}")
            trace = report_of_stream(nsys_here(label), files[WINDOW_NSYS_FILE], label)
        if trace is None:
            return import_path(store, steps_path, name or f"live-{ep.host}-{ep.port}", None)
        return import_path(store, str(trace), name or f"live-{ep.host}-{ep.port}", steps_path)


def server_summary(path: Path) -> dict:
    """The step, ITL and spike figures of the server's steps, as an import of the log alone makes them."""
    from roseprof.api.sections import analyse_trace

    summary, _ = analyse_trace(Trace(tool=Tool("steps", "?")), path)
    return {k: summary[k] for k in SERVER_PARTS if summary.get(k) is not None}


def read_live(run: Run) -> tuple[StepLogRecords, list[dict], dict]:
    """A live run's server steps, client tokens and the torch window's per-step detail ({} without one); one line
    when the run is no live run."""
    path = run.path / "raw" / STEPS_FILE
    log = read_steplog(str(path)) if path.is_file() else None
    if log is None or not tables.is_load(run.manifest):
        raise RoseprofError(f"run {run.id} is no `roseprof live` run (it has no server steps)")
    summary = read_json(run.path / tables.SUMMARY)
    detail = ((summary or {}).get("live") or {}).get("step_detail") or {}
    return log, tables.read_load_tokens(run.path), detail
