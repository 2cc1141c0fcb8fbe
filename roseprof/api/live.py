"""`roseprof live URL --steps N`: a load (roseprof load's machinery, api/load.py) and, when it ends, the server's
last N decode steps from its flight recorder (GET /debug/steps), stored as ONE run: the load's files and
summary, the recorder's snapshot as the server sent it (raw/steps.jsonl), the load's own steps cut from it (the
run's step log, steplog.jsonl: live/load_steps.py; a long-running server's recorder also holds earlier loads'
steps) with their step, ITL and spike figures, and the `live` part, the join of the two (roseprof/live/join.py),
which says how many of the snapshot's steps were left out. `roseprof request RUN ID` reads the run's log and
tokens back.

`--tool steps` (the default) on a server started with --enable-profiling: a steps window of N decode steps,
opened as the load starts (no profiler to warm up), which turns the engine's region clocks on for its steps: they
carry each region's own host time, so a slow step's region is named (live/join.py: RegionGrowth). Without
--enable-profiling the flight recorder's steps alone, which name no region (a warning says so) unless the server's
clocks are on always (ROSEINFER_REGION_CLOCKS=1).

`--tool torch`: a capture window of N decode steps (roseinfer serve --enable-profiling; roseprof/live/window.py)
opened once the load is steady (its first token came back, --warmup has passed, requests are in flight), closed
when it has its N steps or the load ends; its files (raw/window/: the window's step log and Kineto trace) are read
by the torch driver and analysed with the window's steps, so the run also holds the window's regions, kernels and
operators, each window step's top kernels and regions (live/step_detail.py, by the engine's step number), and the
pause the export cost the engine loop. The join itself stays the flight recorder's: every token of the load has
its step (the recorder is read whole, cut to the load's steps), the window's steps have more. A token whose gap
holds the window's start or close (the profiler's stop and its export: the window's `pause`) is put down to the
profiler and left out of the ITL figures (live/load_steps.py: the step log's `profiler_pauses`).

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
    preflight = fetch_steps(url, 0, api_key)  # before any load: the recorder is there and the key is right
    opener = None
    ranks_said = None  # a tensor-parallel server whose other ranks' steps the run lacks: why
    if tool == "steps":
        # A steps window where the server allows windows: it turns the engine's region clocks on for its steps (so
        # a slow step's region is named), and under tensor parallelism it is every rank's (the flight recorder,
        # GET /debug/steps, is rank 0's alone).
        tool, ranks_said = steps_window_or_why(url, api_key, server_world_size(preflight))
    if tool != "steps":
        from roseprof.live.window import WindowClient

        client = WindowClient(url, api_key)
        client.status()  # before any load: profiling is on (else the server's one line: --enable-profiling)
        window_tool = "steps" if tool == STEPS_WINDOW else tool
        warmup_s, at_once = load_options.get("warmup_s", 0.0), tool == STEPS_WINDOW
        opener = SteadyOpener(client, window_tool, steps, warmup_s, at_once)
        load_options["progress"] = opener.wrap(load_options.get("progress"))
        opener.open_if_at_once()

    def add_server_side(summary: dict, tokens: list, folder: Path) -> None:
        from roseprof.live.join import join
        from roseprof.live.load_steps import cut_to_load, window_pauses
        from roseprof.live.path import http_path
        from roseprof.live.window_run import add_window, fetch_window

        # The window closed first, so that the snapshot holds its close and the steps after it.
        window = close_window(summary, opener) if opener is not None else None
        files, capture = fetch_window(summary, folder, opener, window) if window is not None else ({}, None)
        raw = folder / "raw" / STEPS_FILE
        raw.write_bytes(fetch_steps(url, steps if opener is None else RECORDER_ALL, api_key))
        path = tables.steplog_path(folder)  # the load's records, which every figure of the run reads
        cut = cut_to_load(raw, path, tokens, window_pauses(window))
        log = read_steplog(str(path))
        if not cut["kept"]:
            summary["warnings"].append(no_steps_words(tokens, cut, url))
        if log is None or not cut["requests"]:
            return
        if ranks_said:
            summary["warnings"].append(ranks_said)
        if log.steps:
            summary.update(server_summary(path))
        if log.steps and opener is None and not any("host_own_ns" in s for s in log.steps):
            summary["warnings"].append(
                "the server's steps carry no region times, so a slow step's region cannot be named: on a server "
                "started with --enable-profiling, --tool steps opens a steps window, which times the regions of "
                "its steps"
            )
        summary["live"] = part = join(log, tokens)
        part["window"].update(snapshot=cut["snapshot"], before=cut["before"], after=cut["after"])
        if capture:
            part["capture"] = capture
        start_ns = summary.get("serving", {}).get("clock", {}).get("start_monotonic_ns")
        part["path"] = http_path(log, tokens, start_ns, url)
        if window is not None and log.steps:
            add_window(summary, folder, opener, window, files)
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
        *(["--tool", tool] if opener and tool != STEPS_WINDOW else []),
        *as_load[3:],
    ]
    return load(
        store, url, plan, opts, name or f"live-{ep.host}-{ep.port}", api_key=api_key,
        manifest={"live": {"steps": steps, "tool": "steps" if tool == STEPS_WINDOW else tool},
                  "command": command}, extra=add_server_side,
        **load_options,
    )  # fmt: skip


STEPS_WINDOW = "steps-window"  # `--tool steps` on a tensor-parallel server: a steps window on every rank


def server_world_size(body: bytes) -> int:
    """The tensor-parallel world size a /debug/steps body's meta record says (1 where it says none)."""
    import json

    try:
        meta = json.loads(body.split(b"\n", 1)[0])
    except ValueError:
        return 1
    size = meta.get("world_size") if isinstance(meta, dict) else None
    return size if isinstance(size, int) and size > 1 else 1


def steps_window_or_why(url: str, api_key: str | None, size: int) -> tuple[str, str | None]:
    """`--tool steps` on a server of `size` ranks: a steps window (on every rank) where the server allows windows
    (--enable-profiling), else rank 0's flight recorder alone and, with ranks, a line saying so."""
    from roseprof.live.window import WindowClient

    try:
        WindowClient(url, api_key).status()
    except RoseprofError:
        return "steps", None if size == 1 else (
            f"the server runs {size} tensor-parallel ranks and its flight recorder is rank 0's: this run holds "
            "rank 0's steps only (a server started with --enable-profiling gives every rank's, in a steps window)"
        )
    return STEPS_WINDOW, None


class SteadyOpener:
    """Opens the window once the load is steady, from the load's progress reports (one as soon as a request has
    ended with a token while others are in flight, and every 0.5 s: load/runner._report; on the load's event loop:
    the POST goes on a thread of its own, so the client's timing never waits on it). `at_once` (a steps window: no
    profiler to warm up, only the region clocks): as the load starts, or after --warmup, steady or not, so the
    window's steps are the load's first ones."""

    def __init__(self, client, tool: str, steps: int, warmup_s: float, at_once: bool = False) -> None:
        self.client, self.tool, self.steps, self.warmup_s = client, tool, steps, warmup_s
        self.at_once = at_once
        self.thread: threading.Thread | None = None
        self.error: str | None = None

    def wrap(self, progress):
        def report(figures: dict) -> None:
            started = figures.get("ttft_p50_ms") is not None and figures.get("in_flight", 0) > 0
            steady = self.at_once or started
            if self.thread is None and steady and figures.get("elapsed_s", 0.0) >= self.warmup_s:
                self._start()
            if progress is not None:
                progress(figures)

        return report

    def open_if_at_once(self) -> None:
        """Before the load: an at-once window with no warm-up opens now (the load's first step is its first)."""
        if self.at_once and self.warmup_s <= 0:
            self._start()
            self.thread.join()  # the POST is answered between two steps: before the load sends anything

    def _start(self) -> None:
        self.thread = threading.Thread(target=self._open, name="roseprof-window", daemon=True)
        self.thread.start()

    def _open(self) -> None:
        try:
            self.client.start(self.tool, self.steps)
        except RoseprofError as e:
            self.error = str(e)


def no_steps_words(tokens: list[dict], cut: dict, url: str) -> str:
    """Why the run has no step of the load: it streamed no decode token (each request's one token its prefill's),
    or the server's recorder no longer held its steps."""
    if not any(isinstance(s, int) and s >= 0 for row in tokens for s in row["steps"]):
        return "the load streamed no decode token: each request's one token came from its prefill"
    return (
        f"the server's flight recorder held no decode step of the load ({url}/debug/steps: "
        f"{cut['snapshot']} steps)"
    )


def close_window(summary: dict, opener: SteadyOpener) -> dict | None:
    """The window once closed (stopped now if it still records: the load is over), or None, said in a warning,
    where none was opened."""
    if opener.thread is None:
        summary["warnings"].append(
            f"the load ended before it was steady: no {opener.tool} window was opened (a longer load, or less --warmup)"
        )
        return None
    opener.thread.join()
    if opener.error:
        summary["warnings"].append(f"the {opener.tool} window was not opened: {opener.error}")
        return None
    return opener.client.wait_closed(stop=True)


def snapshot(store: RunStore, url: str, steps: int, name: str | None, api_key: str | None) -> Run:
    """No load: the server's last N steps alone, imported as a step log (a run of the `steps` tool). A
    tensor-parallel server started with --enable-profiling: a steps window of N steps on every rank instead (its
    flight recorder is rank 0's)."""
    import tempfile

    from roseprof.api.intake import import_path

    body = fetch_steps(url, steps, api_key)
    size = server_world_size(body)
    if size > 1 and steps_window_or_why(url, api_key, size)[0] == STEPS_WINDOW:
        return window_snapshot(store, url, steps, "steps", name, api_key)  # every rank's steps, not rank 0's
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
    from roseprof.live.rank_window import rank_files, world_size
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
        # every rank's trace (a tensor-parallel server's window: one file a rank, one run of several ranks); the
        # ranks' step logs lie beside rank 0's, where the import looks for them
        traces = [str(p) for p in rank_files(files, WINDOW_TRACE_FILE, world_size(window))]
        if WINDOW_NSYS_FILE in files:  # the report made from nsys' stream, which an import exports again
            from roseprof.drivers.nsys.window_stream import nsys_here, report_of_stream

            label = client.address(f"/profile/files/{WINDOW_NSYS_FILE}")
            traces = [str(report_of_stream(nsys_here(label), files[WINDOW_NSYS_FILE], label))]
        if not traces:
            return import_path(store, steps_path, name or f"live-{ep.host}-{ep.port}", None)
        return import_path(
            store, traces[0] if len(traces) == 1 else traces, name or f"live-{ep.host}-{ep.port}", steps_path
        )


def server_summary(path: Path) -> dict:
    """The step, ITL and spike figures of the server's steps, as an import of the log alone makes them."""
    from roseprof.api.sections import analyse_trace

    summary, _ = analyse_trace(Trace(tool=Tool("steps", "?")), path)
    return {k: summary[k] for k in SERVER_PARTS if summary.get(k) is not None}


def read_live(run: Run) -> tuple[StepLogRecords, list[dict], dict]:
    """A live run's server steps (the load's: its step log; a run stored before it kept one, the recorder's
    snapshot), client tokens and the torch window's per-step detail ({} without one); one line when the run is no
    live run."""
    path = tables.steplog_path(run.path)
    if not path.is_file():
        path = run.path / "raw" / STEPS_FILE
    log = read_steplog(str(path)) if path.is_file() else None
    if log is None or not tables.is_load(run.manifest):
        raise RoseprofError(f"run {run.id} is no `roseprof live` run (it has no server steps)")
    summary = read_json(run.path / tables.SUMMARY)
    detail = ((summary or {}).get("live") or {}).get("step_detail") or {}
    return log, tables.read_load_tokens(run.path), detail
