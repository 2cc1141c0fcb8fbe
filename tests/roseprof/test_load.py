"""`roseprof load` as a user runs it: a subprocess against a server (the stub that streams instantly, its faults,
and roseinfer serve), the run it stores, `ls`, `show` at 80 columns, `diff` and its gate."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from roseprof.load.schedule import Length, Plan, parse_length, read_dataset
from roseprof.load.serving import parse_slo
from tests.helpers import assert_one_line_error, roseprof

ENV80 = {"COLUMNS": "80"}


class Stub:
    """`python -m roseprof.load.stub` on a free port, torn down after."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "roseprof.load.stub", "--port", "0", *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        assert "ready at" in line, line
        self.url = line.split("ready at ")[1].strip()

    def wait_done(self, n: int, load: subprocess.Popen, timeout_s: float = 120.0) -> None:
        """Until the n-th stream has ended (a stub started with --say-done); fails if `load` ends or stalls first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and load.poll() is None:
            if select.select([self.proc.stdout], [], [], 0.5)[0]:
                line = self.proc.stdout.readline()
                assert line, "the stub ended"
                if line.strip() == f"done {n}":
                    return
        raise AssertionError(
            f"no {n} streams done: the load {'ended' if load.poll() is not None else 'stalled'}"
        )

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def stub():
    made = []

    def start(*args: str) -> str:
        made.append(Stub(*args))
        return made[-1].url

    yield start
    for s in made:
        s.stop()


def runs_of(traces: Path) -> list[Path]:
    return sorted(p for p in traces.iterdir() if not p.name.startswith(".") and p.is_dir())


def load(url: str, traces: Path, *args, **kw):
    return roseprof("load", url, "--traces-dir", traces, *args, env=ENV80, **kw)


def test_a_load_is_a_run_that_ls_and_show_present(stub, tmp_path):
    url = stub()
    traces = tmp_path / "traces"
    proc = load(
        url, traces, "--requests", 40, "--rate", 200, "--output-len", 16, "--slo", "ttft=10s", "--name", "s"
    )
    assert proc.returncode == 0, proc.stderr
    (run,) = runs_of(traces)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["tool"]["name"] == "load" and manifest["status"] == "complete"
    serving = json.loads((run / "summary.json").read_text())["serving"]
    assert serving["count"] == 40 and serving["completed"] == 40
    assert serving["requests"]["output_tokens"] == [16] * 40  # ignore_eos: the lengths asked
    assert serving["goodput"]["requests"] == 40
    assert set(serving["ttft"]) >= {"p50_ms", "p90_ms", "p95_ms", "p99_ms", "p99_9_ms"}
    assert serving["itl"]["count"] == 40 * 15  # every gap
    tokens = json.loads((run / "load_tokens.json").read_text())
    assert tokens[0]["token_ids"] == list(range(1000, 1016)) and tokens[0]["steps"] == list(range(16))
    assert all(t["request_id"].startswith("cmpl-stub-") for t in tokens)
    # show: verdict first, 80 columns
    shown = roseprof("show", "s", "--traces-dir", traces, env=ENV80)
    lines = shown.stdout.splitlines()
    assert lines[1].startswith("p99 ITL ") and "goodput 100.0% at 200 req/s" in lines[1], lines[:3]
    assert max(map(len, lines[:-1])) <= 80, shown.stdout  # the last line: the run folder's path, never cut
    assert "TTFT" in shown.stdout and "throughput" in shown.stdout
    listed = roseprof("ls", "--traces-dir", traces, env=ENV80)
    assert run.name in listed.stdout and "load" in listed.stdout


def test_the_same_seed_gives_the_same_schedule_and_lengths():
    plan = Plan(seed=7, requests=50, rate=10.0, arrivals="gamma", burstiness=0.5,
                prompt_len=Length(4, 40), output_len=Length(8, 64))  # fmt: skip
    a, b = list(plan.schedule()), list(plan.schedule())
    assert a == b
    other = list(Plan(seed=8, requests=50, rate=10.0, prompt_len=Length(4, 40)).schedule())
    assert [p.at_s for p in other] != [p.at_s for p in a]
    assert {len(p.prompt) for p in a} != {len(a[0].prompt)}  # uniform lengths vary
    assert all(4 <= len(p.prompt) <= 40 and 8 <= p.max_tokens <= 64 for p in a)
    # the lengths do not depend on the rate
    slower = list(Plan(seed=7, requests=50, rate=1.0, arrivals="gamma", burstiness=0.5,
                       prompt_len=Length(4, 40), output_len=Length(8, 64)).schedule())  # fmt: skip
    assert [p.max_tokens for p in slower] == [p.max_tokens for p in a]
    # Poisson at 10 req/s: the mean gap is near 0.1 s over many requests
    many = [p.at_s for p in Plan(seed=1, requests=4000, rate=10.0).schedule()]
    assert 0.09 < many[-1] / len(many) < 0.11


def test_lengths_slo_and_dataset_parse(tmp_path):
    assert parse_length("16", "x") == Length(16, 16) and parse_length("8-32", "x") == Length(8, 32)
    assert parse_slo("ttft=200ms,tpot=5ms,e2e=2s") == {"ttft_ms": 200.0, "tpot_ms": 5.0, "e2e_ms": 2000.0}
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "hello", "output_len": 5}\n\n{"prompt": "world"}\n')
    assert read_dataset(str(data)) == (("hello", 5), ("world", None))


@pytest.mark.parametrize(
    "args, text",
    [
        (["--requests", "5", "--rate", "1", "--slo", "ttft=fast"], "--slo 'ttft=fast'"),
        (["--requests", "5", "--rate", "1", "--prompt-len", "9-3"], "--prompt-len '9-3'"),
        (["--requests", "5"], "give --rate R or --concurrency C"),
        (["--rate", "1"], "give --requests N or --duration S"),
    ],
)
def test_bad_options_are_one_line(stub, tmp_path, args, text):
    proc = load(stub(), tmp_path / "t", *args)
    assert_one_line_error(proc, 2, text)
    assert not (tmp_path / "t").exists() or not runs_of(tmp_path / "t")


@pytest.mark.parametrize("port", ["99999", "http", "0"])
def test_a_url_of_no_port_number_is_one_line_that_says_what_a_port_is(tmp_path, port):
    """A port past 65535 is a number, just not a port: the error says which numbers are ports."""
    proc = load(f"http://localhost:{port}", tmp_path / "t", "--requests", 2, "--concurrency", 1)
    assert_one_line_error(proc, 2, "the port must be a number from 1 to 65535")
    assert not (tmp_path / "t").exists()


def test_a_bad_dataset_is_one_line_naming_the_file(stub, tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "ok"}\nnot json\n')
    proc = load(stub(), tmp_path / "t", "--requests", 2, "--rate", 1, "--dataset", data)
    assert_one_line_error(proc, 2, f"{data}:2: not JSON")


def test_an_unreachable_url_is_one_line_and_stores_nothing(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    proc = load(url, tmp_path / "t", "--requests", 3, "--rate", 10)
    assert_one_line_error(proc, 2, f"cannot reach {url}")
    assert not (tmp_path / "t").exists() or not runs_of(tmp_path / "t")


@pytest.mark.parametrize(
    "fault, kind",
    [("http500", "http_500"), ("malformed", "bad_stream"), ("cut", "broken_stream"), ("stall", "timeout")],
)
def test_server_faults_are_counted_by_kind_and_the_run_is_kept(stub, tmp_path, fault, kind):
    traces = tmp_path / "t"
    proc = load(stub("--fault", fault), traces, "--requests", 4, "--concurrency", 2, "--timeout", "0.5")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.strip()]
    assert line.startswith("roseprof: warning: 4 of 4 requests failed")
    (run,) = runs_of(traces)
    serving = json.loads((run / "summary.json").read_text())["serving"]
    assert serving["errors"] == {kind: 4}
    assert serving["requests"]["error"] == [kind] * 4
    assert f"{kind} 4" in proc.stdout  # show names the errors
    # a cut stream streamed tokens before it broke: the first line says why there is no ITL, truly
    assert "no ITL (no request completed)" in proc.stdout


def test_errors_mid_run_keep_the_good_requests(stub, tmp_path):
    traces = tmp_path / "t"
    proc = load(stub("--fault", "mid500"), traces, "--requests", 8, "--concurrency", 1)
    assert proc.returncode == 1
    (run,) = runs_of(traces)
    serving = json.loads((run / "summary.json").read_text())["serving"]
    assert serving["completed"] == 3 and serving["errors"] == {"http_500": 5}


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a non-interactive shell's `cmd &` (or nohup) starts it


def test_ls_fits_80_columns_beside_the_longest_id_and_an_incomplete_run(tmp_path):
    """An import's id holds its file's name, cut; an interrupted load's status is `incomplete`: the two, whole as
    `ls` keeps them, must share 80 columns (a 48-character name made an id of 70: 82 columns)."""
    import shutil

    from tests.helpers import DATA, assert_fits

    traces = tmp_path / "t"
    server = Stub("--token-delay-ms", "5", "--say-done")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "roseprof", "load", server.url, "--traces-dir", str(traces),
             "--duration", "120", "--rate", "20", "--output-len", "8"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **ENV80},
        )  # fmt: skip
        server.wait_done(3, proc)  # some requests done
        time.sleep(0.5)  # and read by the load
        proc.send_signal(signal.SIGINT)
    finally:
        server.stop()
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    longest = tmp_path / ("a-trace-named-at-length-by-some-script-" * 3 + ".sqlite")
    shutil.copy(DATA / "nsys" / "cpu-nsys2022.4-nvtx.sqlite", longest)
    imported = roseprof(
        "import", longest, "--traces-dir", traces, "--dashboards-dir", tmp_path / "d", env=ENV80
    )
    assert imported.returncode == 0, imported.stderr
    listed = roseprof("ls", "--traces-dir", traces, env=ENV80)
    assert listed.returncode == 0 and "incomplete" in listed.stdout
    assert_fits(listed.stdout, 80)
    for run in runs_of(traces):  # whole
        assert run.name in listed.stdout


@pytest.mark.parametrize("started_ignoring_sigint", [False, True])
def test_ctrl_c_keeps_the_requests_done_as_an_incomplete_run(tmp_path, started_ignoring_sigint):
    """SIGINT from a terminal, and from a CI script that started the load in the background (SIGINT inherited
    ignored): either way the load stops and keeps what it did."""
    traces = tmp_path / "t"
    server = Stub("--token-delay-ms", "5", "--say-done")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "roseprof", "load", server.url, "--traces-dir", str(traces), "--duration",
             "120", "--rate", "20", "--output-len", "8"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **ENV80},
            preexec_fn=_ignore_sigint if started_ignoring_sigint else None,
        )  # fmt: skip
        server.wait_done(3, proc)  # some requests done, more in flight and due
        time.sleep(0.5)  # and read by the load
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        server.stop()
    assert proc.returncode == 130, err
    (line,) = [x for x in err.splitlines() if x.strip()]
    assert "interrupted" in line and "kept as run" in line and "(incomplete)" in line
    (run,) = runs_of(traces)
    assert json.loads((run / "manifest.json").read_text())["status"] == "incomplete"
    serving = json.loads((run / "summary.json").read_text())["serving"]
    assert serving["completed"] >= 1
    assert not [p for p in traces.iterdir() if p.name.startswith(".tmp-")]
    shown = roseprof("show", run.name, "--traces-dir", traces, env=ENV80)
    assert shown.returncode == 0 and "incomplete" in shown.stdout


def test_diff_of_loads_gates_a_slower_server(stub, tmp_path):
    traces = tmp_path / "t"
    # 1 ms against 12 ms a token: a change no busy machine's jitter can hide or fake
    fast, slow = stub("--token-delay-ms", "1"), stub("--token-delay-ms", "12")
    common = ("--requests", 30, "--concurrency", 4, "--output-len", 12)
    for url, name in ((fast, "before"), (fast, "again"), (slow, "after")):
        assert load(url, traces, *common, "--name", name).returncode == 0
    # fast vs slow: ITL and TPOT grew far beyond any floor; the gate fires
    proc = roseprof("diff", "before", "after", "--traces-dir", traces, "--json", "--fail-on-regression", 10,
                    "--dashboards-dir", tmp_path / "d")  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    by_name = {m["name"]: m for m in result["metrics"]}
    itl = by_name["serving.itl.p50_ms"]
    assert itl["significant"] and itl["ci_low_pct"] > itl["floor_pct"]
    assert "serving.tpot.p50_ms" in result["regressions"]
    # the terminal diff reads at 80 columns
    shown = roseprof(
        "diff", "before", "after", "--traces-dir", traces, "--dashboards-dir", tmp_path / "d", env=ENV80
    )
    assert shown.returncode == 0 and "serving.itl.p50_ms" in shown.stdout
    assert max(map(len, shown.stdout.splitlines()[:-1])) <= 80


def test_diff_of_two_loads_of_the_same_server_passes_the_gate(stub, tmp_path):
    traces = tmp_path / "t"
    # 20 ms a token: a busy machine's few ms of jitter is small beside it (at 2 ms it moved TTFT p50 past the floor)
    url = stub("--token-delay-ms", "20")
    common = ("--requests", 30, "--concurrency", 4, "--output-len", 6)
    for name in ("a", "b"):
        assert load(url, traces, *common, "--name", name).returncode == 0
    proc = roseprof("diff", "a", "b", "--traces-dir", traces, "--json", "--fail-on-regression", 10,
                    "--dashboards-dir", tmp_path / "d")  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert json.loads(proc.stdout)["regressions"] == []


def test_a_load_of_roseinfer_serve_keeps_the_join_to_server_steps_and_its_metrics(tmp_path):
    from tests.roseinfer.serve.conftest import ServerProcess

    server = ServerProcess("--device", "cpu").wait_ready()
    try:
        traces = tmp_path / "t"
        proc = load(
            server.url, traces, "--requests", 6, "--concurrency", 3, "--output-len", 8, "--prompt-len", 4
        )
        assert proc.returncode == 0, proc.stderr
    finally:
        server.stop()
    (run,) = runs_of(traces)
    serving = json.loads((run / "summary.json").read_text())["serving"]
    assert serving["completed"] == 6 and serving["requests"]["output_tokens"] == [8] * 6
    assert serving["model"] == "gpt2-tiny"
    tokens = json.loads((run / "load_tokens.json").read_text())
    for row in tokens:  # the engine's request id and each token's decode step: what issue 49 joins on
        assert row["request_id"] and len(row["steps"]) == 8 and all(isinstance(s, int) for s in row["steps"])
        assert row["steps"] == sorted(row["steps"])
    assert len({row["request_id"] for row in tokens}) == 6
    metrics = json.loads((run / "load_metrics.json").read_text())
    assert len(metrics) >= 2  # before and after (and every second between)
    server_ttft = serving["server"]["ttft"]
    assert (
        server_ttft["histogram"] == "roseinfer:time_to_first_token_seconds" and server_ttft["requests"] == 6
    )
    assert "server TTFT" in proc.stdout


def test_export_gives_one_track_per_request_with_its_tokens(stub, tmp_path):
    traces = tmp_path / "t"
    assert (
        load(stub(), traces, "--requests", 5, "--concurrency", 2, "--output-len", 4, "--name", "e").returncode
        == 0
    )
    out = tmp_path / "load.json"
    proc = roseprof("export", "e", "--traces-dir", traces, "-o", out)
    assert proc.returncode == 0, proc.stderr
    events = json.loads(out.read_text())["traceEvents"]
    requests = [e for e in events if e["ph"] == "X" and e["name"] == "request"]
    assert sorted(e["tid"] for e in requests) == [1, 2, 3, 4, 5]
    for e in requests:
        tokens = [t for t in events if t["ph"] == "i" and t["tid"] == e["tid"]]
        assert len(tokens) == 4 and all(e["ts"] <= t["ts"] <= e["ts"] + e["dur"] for t in tokens)


def test_open_renders_the_load_dashboard(stub, tmp_path):
    traces, dash = tmp_path / "t", tmp_path / "d"
    assert (
        load(stub(), traces, "--requests", 6, "--concurrency", 2, "--output-len", 4, "--name", "o").returncode
        == 0
    )
    proc = roseprof(
        "open", "o", "--traces-dir", traces, "--dashboards-dir", dash, env={**ENV80, "DISPLAY": ""}
    )
    assert proc.returncode == 0, proc.stderr
    (page,) = dash.glob("*.html")
    text = page.read_text()
    for title in ("TTFT and ITL distributions", "Latency over the run", "Concurrency over time", "Request waterfall",
                  "latency (ms, client clock)"):  # fmt: skip
        assert title in text, title


def test_a_long_loads_itl_cdf_is_thinned_but_its_tail_is_whole(stub, tmp_path):
    """Thousands of ITLs are drawn through at most CDF_POINTS of them by rank and every one of their top 1%."""
    import numpy as np

    from roseprof.render import load_figures
    from roseprof.run.store import RunStore
    from roseprof.run.tables import read_load_tokens

    traces = tmp_path / "t"
    args = ("--requests", 48, "--concurrency", 8, "--output-len", 64, "--name", "long")
    assert load(stub(), traces, *args).returncode == 0
    (run,) = RunStore(traces).runs()
    tokens = read_load_tokens(run.path)
    itl = np.sort(np.concatenate([np.diff(r["t_ms"]) for r in tokens if len(r["t_ms"]) > 1]))
    assert itl.size > load_figures.CDF_POINTS  # 48 x 63
    (cdf,) = [
        f for f in load_figures.figures(run.summary()["serving"], tokens) if "CDF" in f.layout.title.text
    ]
    (line,) = [t for t in cdf.data if t.name.startswith("ITL")]
    assert f"ITL through {len(line.x):,} of its {itl.size:,} points" in cdf.layout.title.text  # the subtitle
    x, y = np.asarray(line.x), np.asarray(line.y)
    tail = int(np.ceil(itl.size * load_figures.CDF_TAIL))
    assert len(x) <= load_figures.CDF_POINTS + tail and np.all(np.diff(y) > 0)
    assert x[0] == itl[0] and y[-1] == 1.0
    np.testing.assert_array_equal(x[-tail:], itl[-tail:])  # the tail, point by point
    np.testing.assert_array_equal(y[-tail:], np.arange(itl.size - tail + 1, itl.size + 1) / itl.size)


def test_a_piped_load_computes_no_live_figures_while_it_measures(stub, monkeypatch):
    """Off a terminal the progress display is off, and the load's event loop runs nothing it does not need: the
    live figures (numpy percentiles, whose first call imports for tens of ms) stalled every stream in flight."""
    import asyncio
    import io

    from roseprof.load import runner
    from roseprof.load.client import parse_url
    from roseprof.render.load_progress import LoadProgress

    assert LoadProgress(stream=io.StringIO()).callback() is None  # piped: no display, no callback

    def no_live(self):
        raise AssertionError("live figures computed during a load nobody watches")

    monkeypatch.setattr(runner.LoadState, "live", no_live)
    state = runner.LoadState()
    plan = Plan(seed=0, requests=4, concurrency=2, prompt_len=Length(4, 4), output_len=Length(8, 8))
    asyncio.run(
        runner.run(parse_url(stub("--token-delay-ms", "200")), plan, runner.LoadOptions(), state, None)
    )
    assert [r.status for r in state.done()] == ["ok"] * 4


def _events_read(pieces: list[bytes], chunked: bool):
    """A response body fed to the client's reader piece by piece (each piece one read), read into a record."""
    import asyncio

    from roseprof.load.client import Record, StreamError, _read_events

    async def go():
        reader = asyncio.StreamReader()
        for piece in pieces:
            reader.feed_data(piece)
        reader.feed_eof()
        rec = Record(index=0, prompt_len=None, max_tokens=4)
        try:
            await _read_events(reader, chunked, rec, stall_s=5)
        except StreamError as e:
            return rec, e.kind
        return rec, None

    return asyncio.run(go())


def _sse(chunk: dict) -> bytes:
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _chunked(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


@pytest.mark.parametrize("chunked", [False, True])
def test_a_token_whose_text_is_done_does_not_end_the_stream(chunked):
    """The reader stops at the `data: [DONE]` line, never at a token that reads "[DONE]" (its JSON text): every
    token of the stream is kept, and a stream cut before its [DONE] is a broken stream with the tokens it got."""
    events = [_sse({"id": "r1", "choices": [{"text": t}]}) for t in ("a", "[DONE]", "data: [DONE]", "b")]
    done = b"data: [DONE]\n\n"
    wrap = _chunked if chunked else (lambda b: b)
    pieces = [wrap(e) for e in events] + [wrap(done)] + ([b"0\r\n\r\n"] if chunked else [])
    rec, error = _events_read(pieces, chunked)
    assert error is None and len(rec.times) == 4 and rec.request_id == "r1"
    # the same stream cut after two tokens: a broken stream that keeps them
    rec, error = _events_read(pieces[:2], chunked)
    assert error == "broken_stream" and len(rec.times) == 2
