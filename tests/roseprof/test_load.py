"""`roseprof load` as a user runs it: a subprocess against a server (the stub that streams instantly, its faults,
and roseinfer serve), the run it stores, `ls`, `show` at 80 columns, `diff` and its gate. The load's plan and
client in process: test_load_client.py; `export` and `open` of a stored load: test_load_views.py."""

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
