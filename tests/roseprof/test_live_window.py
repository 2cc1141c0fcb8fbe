"""`roseprof live --tool torch` against a real `roseinfer serve --enable-profiling` (gpt2-tiny on CPU, where
torch.profiler's CPU operators are the kernels): one run holding the load, the server's steps and the torch
window's regions and per-step operators, which `show`, `request` and `open` read and the store's checks pass."""

from __future__ import annotations

import json
import re

import pytest

from roseprof.analysis.spikes import token_causes
from roseprof.api import open_store
from roseprof.run import tables
from roseprof.workload.steplog import read_steplog
from tests.helpers import assert_one_line_error, roseprof
from tests.roseinfer.serve.conftest import ServerProcess

ENV = {"COLUMNS": "80"}
WINDOW = 15  # decode steps


@pytest.fixture(scope="module")
def window_run(tmp_path_factory):
    """(server, traces folder, the run's folder, its show output)."""
    tmp = tmp_path_factory.mktemp("live-window")
    server = ServerProcess("--enable-profiling", "--max-batch-size", "8", "--api-key", "k").wait_ready()
    try:
        traces = tmp / "traces"
        proc = roseprof(
            "live", server.url, "--steps", str(WINDOW), "--tool", "torch", "--requests", "12", "--concurrency", "4",
            "--output-len", "32", "--api-key", "k", "--traces-dir", traces, "--name", "window", env=ENV,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        (folder,) = [p for p in traces.iterdir() if "window" in p.name]
        yield server, traces, folder, proc.stdout
    finally:
        server.stop()


def test_one_run_holds_the_load_the_steps_and_the_window(window_run):
    _, traces, folder, out = window_run
    run = open_store(traces).resolve(folder.name)
    summary = run.summary()  # the sections' checks
    tables.check_stored_run(run.path, run.manifest)  # the store's files
    assert run.manifest["tool"]["name"] == tables.LOAD_TOOL and run.manifest["live"]["tool"] == "torch"
    assert "--tool" in run.manifest["command"] and "torch" in run.manifest["command"]
    part = summary["live"]
    capture = part["capture"]
    assert capture["tool"] == "torch" and capture["asked"] == WINDOW
    # exactly the window's steps (or fewer, said, when the load ended first), each with its operators and regions
    assert 0 < capture["steps"] <= WINDOW and capture["stopped_early"] == (capture["steps"] < WINDOW)
    first = capture["first_step"]
    assert sorted(map(int, part["step_detail"])) == list(range(first, first + capture["steps"]))
    detail = part["step_detail"][str(first)]
    assert detail["kernel_kind"] == "cpu_op" and detail["kernels"][0][0].startswith("aten::")
    assert all(name.startswith("roseinfer.") for name, _ in detail["regions"])
    # the window's regions and operators (torch driver) beside the client's serving figures
    assert any(r["name"] == "roseinfer.lm_head" for r in summary["regions"])
    assert summary["operators"]["top"] and summary["serving"]["completed"] == 12
    assert {"stop_ms", "export_ms"} <= set(capture["pause"])
    assert (folder / "raw" / "window" / "trace.json.gz").is_file()
    # every client token still joins to a step (the flight recorder's, the whole load)
    assert part["join"]["outside_window"] == 0 and part["join"]["joined"] > 0
    # show: the slowest requests first, then (further down) the window and what it cost the loop
    assert out.splitlines()[1].startswith("req cmpl-"), out[:800]
    assert "torch window: steps" in out and "profiler stop" in out


def test_request_lists_the_operators_of_each_window_step(window_run):
    _, traces, folder, _ = window_run
    summary = json.loads((folder / "summary.json").read_text())
    in_window = set(summary["live"]["step_detail"])
    tokens = json.loads((folder / tables.LOAD_TOKENS).read_text())
    row = next(r for r in tokens if in_window & {str(s) for s in r["steps"]})
    proc = roseprof("request", folder.name, row["request_id"], "--traces-dir", traces, env=ENV)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    shown = [line for line in lines if line.strip().startswith("CPU ops aten::")]
    assert len(shown) == len(in_window & {str(s) for s in row["steps"]})
    per_token = [line for line in lines if line.strip()[:1].isdigit()]  # one line a token
    assert len(per_token) == len(row["steps"])


def test_window_run_opens_as_a_dashboard(window_run, tmp_path):
    _, traces, folder, _ = window_run
    proc = roseprof("open", folder.name, "--traces-dir", traces, "--dashboards-dir", tmp_path, env=ENV)
    assert proc.returncode == 0, proc.stderr
    (page,) = list(tmp_path.glob("*.html"))
    assert "torch window: steps" in page.read_text()


def test_torch_window_without_enable_profiling_is_one_line(tmp_path):
    server = ServerProcess("--max-batch-size", "4").wait_ready()
    try:
        proc = roseprof("live", server.url, "--steps", "5", "--tool", "torch", "--requests", "2",
                        "--traces-dir", tmp_path / "traces", env=ENV)  # fmt: skip
    finally:
        server.stop()
    assert_one_line_error(proc, 2, "--enable-profiling")
    assert not (tmp_path / "traces").exists() or not any((tmp_path / "traces").iterdir())


def test_a_window_with_no_load_imports_its_trace_and_steps(window_run, tmp_path):
    """No --requests/--duration: the window opens at once on the server's own traffic (here a thread's requests)
    and its trace is imported with the window's steps, a run of the torch tool."""
    import threading

    server = window_run[0]
    done = threading.Event()

    def traffic() -> None:
        while not done.is_set():
            server.post("/v1/completions", {"prompt": "x", "max_tokens": 8, "ignore_eos": True},
                        headers={"Authorization": "Bearer k"})  # fmt: skip

    thread = threading.Thread(target=traffic)
    thread.start()
    try:
        proc = roseprof("live", server.url, "--steps", "6", "--tool", "torch", "--api-key", "k",
                        "--traces-dir", tmp_path / "traces", "--dashboards-dir", tmp_path, env=ENV)  # fmt: skip
    finally:
        done.set()
        thread.join()
    assert proc.returncode == 0, proc.stderr
    (folder,) = list((tmp_path / "traces").iterdir())
    run = open_store(tmp_path / "traces").resolve(folder.name)
    assert run.manifest["tool"]["name"] == "torch"
    assert run.summary()["steps"]["count"] == 6
    tables.check_stored_run(run.path, run.manifest)


@pytest.fixture(scope="module")
def second_window(window_run, tmp_path_factory):
    """A second load with a torch window on the fixture's server, whose recorder holds the fixture's load before
    it: (run folder, summary, its client tokens, show output). Lengths drawn from a range (seeded) keep the 4
    streams out of step, so requests are in flight across the window's close; 100+ steps after the window keep the
    load from ending before it closes."""
    server = window_run[0]
    traces = tmp_path_factory.mktemp("second-window") / "traces"
    proc = roseprof(
        "live", server.url, "--steps", str(WINDOW), "--tool", "torch", "--requests", "12", "--concurrency", "4",
        "--prompt-len", "8", "--output-len", "48-80", "--api-key", "k", "--traces-dir", traces, env=ENV,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (folder,) = list(traces.iterdir())
    summary = json.loads((folder / "summary.json").read_text())
    # The window opens once the load is steady: when a request has ended with a token while others are in
    # flight, no earlier than the load's ~48th step (the shortest output is 48 tokens); its 15 steps end by ~63,
    # while the load's 12 requests of 48-80 tokens over 4 streams run ~190 steps: it closes on its own.
    assert summary["live"]["capture"]["steps"] == WINDOW and not summary["live"]["capture"]["stopped_early"]
    return folder, summary, json.loads((folder / tables.LOAD_TOKENS).read_text()), proc.stdout


def test_a_window_runs_step_figures_are_its_loads_steps(second_window):
    """The fixture's load is in the server's recorder before the second one's: the run's step figures are the
    second load's steps, from its first decode token's step to its last's; the others are counted as left out."""
    folder, summary, rows, out = second_window
    steps = [s for row in rows for s in row["steps"] if s is not None and s >= 0]
    window = summary["live"]["window"]
    assert window["first_step"] == min(steps) and window["before"] >= min(steps) > 0
    assert summary["steps"]["count"] == window["steps"] == max(steps) - min(steps) + 1
    assert f"decode steps: {window['steps']}  " in out
    # the steps the spikes name are the load's, by the server's number (what its tokens and `request` say)
    first, last = min(steps), max(steps)
    assert all(first <= s["step"] <= last for s in summary["spikes"]["listed"] if s["step"] >= 0)
    assert all(first <= int(k) <= last for k in re.findall(r"decode step (\d+)", out)), out
    # the ITL figures' tokens are this load's: each request's after its first (less those left out, and why)
    left_out = sum(e["tokens"] for e in (summary["itl"].get("left_out") or {}).values())
    assert summary["itl"]["count"] + left_out == sum(len(row["steps"]) - 1 for row in rows)
    said = " ".join(out.split())
    assert f"the snapshot held {window['before'] + window['after']} more (not the load's: " in said


def test_the_windows_close_is_the_profilers_gap_not_a_steps(second_window):
    """The window's close (the profiler's stop on the loop, its export beside it) pauses the engine loop: a token
    whose gap holds it is put down to the profiler, left out of the ITL figures (so of the rollover and spike
    figures) and named as the cause of a slow request (where the pause took most of its gap's time over the
    median), never a decode step."""
    folder, summary, rows, out = second_window
    part, capture = summary["live"], summary["live"]["capture"]
    last = capture["first_step"] + WINDOW - 1
    # a line that names the window names it as the cause, never beside a step's
    pauses = (f"the torch window's close after step {last}", f"start after step {capture['first_step'] - 1}")
    for e in (e for e in part["slowest"] if e["by"] == "itl"):
        if "window" in e["line"]:
            assert e["cause"] == "profiler" and any(p in e["line"] for p in pauses), e
    # The close holds the loop ~70 ms against ~4 ms steps, with 4 requests in flight across it: it is the worst
    # gap of at least one request, said once (each request is listed by its worst gap that is not the profiler's).
    paused = part.get("profiler") or []
    assert paused and all(any(p in x["line"] for p in pauses) for x in paused), [
        e["line"] for e in part["slowest"]
    ]
    assert sum(x["requests"] for x in paused) >= 1
    assert " ".join(out.split()).count("worst gap was the torch window's") == len(paused)  # once in show
    said = " ".join(out.split())
    assert "ITL figures leave out" in said and "the profiler starting or writing its trace" in said
    # the run's step log says where the window paused the loop
    log = read_steplog(str(tables.steplog_path(folder)))
    close = log.meta["profiler_pauses"][-1]
    assert close["after_step"] == last and close["loop_ms"] >= capture["pause"]["stop_ms"]
    # the tokens whose gap on the server holds the close (a request's token of the step after the window's last,
    # its previous one of that last step) are the ones left out
    tc = token_causes(log, None, None)
    keys = list(zip(tc["tok"]["request"].tolist(), tc["tok"]["step"].tolist()))
    at = last - log.meta["first_step"]  # the window's last step, as a position in the run's step log
    across = [
        (r["id"], b)
        for r in log.requests
        for a, b in zip(r["token_step"], r["token_step"][1:])
        if (a, b) == (at, at + 1)
    ]
    out_of = {k: (why, took) for k, why, took in zip(keys, tc["why_out"], tc["took_out"])}
    assert across and all(out_of[k][0] == "profiler" for k in across), [out_of[k] for k in across]
    assert summary["itl"]["left_out"]["profiler"]["tokens"] >= len(across)
    # a slow request whose worst gap is one of those: the profiler's where the pause took most of it
    ids = {r["request_id"]: r["id"] for r in log.requests}
    for e in (e for e in part["slowest"] if e["by"] == "itl" and e["step"] == last + 1):
        took = out_of.get((ids[e["request_id"]], at + 1), ("", 0.0))[1] / 1e6
        if took >= 0.5 * (e["ms"] - tc["median_ms"]):
            assert e["cause"] == "profiler" and pauses[0] in e["line"], e
