"""`roseprof load --sweep` and `--repeat` as a user runs them (a subprocess against the stub server, 80 columns,
tmp folders), and the knee of a throughput-latency curve on synthetic curves."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from roseprof.errors import RoseprofError
from roseprof.load.sweep import auto_rates, knee, parse_rates
from tests.helpers import assert_one_line_error, roseprof
from tests.roseprof import test_load
from tests.roseprof.test_load import ENV80, load, runs_of

stub = test_load.stub  # the fixture: the stub server on a free port


def point(asked, achieved=None, ttft=2.0, sent=None):
    return {"asked_rate": asked, "sent_rate": sent if sent is not None else asked,
            "achieved_rate": asked if achieved is None else achieved, "output_tok_s": 10.0 * asked,
            "ttft_p50_ms": ttft, "ttft_p99_ms": ttft, "itl_p50_ms": 1.0, "itl_p99_ms": 1.0, "goodput_pct": 100.0}  # fmt: skip


def test_the_knee_is_the_last_rate_kept_up_with_before_latency_rises():
    # requests complete slower than sent from 40 req/s: the knee is 30
    curve = [point(10), point(20), point(30, 29.0), point(40, 31.0), point(50, 32.0)]
    found = knee(curve)
    assert found["rate"] == 30 and found["saturated"] and "40 req/s" in found["why"]
    # order of the rows does not matter
    assert knee(curve[::-1])["rate"] == 30
    # TTFT p50 more than doubles (plus 5 ms) at 30 while every rate is kept up with: the knee is 20
    rising = [point(10, ttft=8.0), point(20, ttft=12.0), point(30, ttft=30.0), point(40, ttft=90.0)]
    found = knee(rising)
    assert found["rate"] == 20 and "TTFT p50 rose" in found["why"]
    # a noisy healthy point past the first unhealthy one does not move the knee up
    noisy = [point(10), point(20, 12.0), point(30), point(40)]
    assert knee(noisy)["rate"] == 10
    # sub-millisecond TTFT jitter (0.4 -> 1.6 ms) is no rise: the slack
    jitter = [point(10, ttft=0.4), point(20, ttft=1.6)]
    assert knee(jitter) == {"index": 1, "rate": 20, "saturated": False,
                            "why": "every rate measured was kept up with: the knee is at or above the highest"}  # fmt: skip
    # past it at the lowest rate: no knee
    assert knee([point(10, 5.0), point(20, 6.0)])["rate"] is None
    # keeping up is judged against the rate the arrivals realised, not the one asked (a short Poisson load)
    assert knee([point(10, achieved=8.0, sent=8.4), point(20)])["rate"] == 20


def test_sweep_rates_parse_and_auto_rates_span_the_probes():
    assert parse_rates("20, 5,5,10") == [5.0, 10.0, 20.0]
    assert parse_rates("auto") is None
    for bad in ("5,x", "0,5", "inf", "-1"):
        with pytest.raises(RoseprofError):
            parse_rates(bad)
    rates = auto_rates(12.3, 187.0)
    assert rates[0] == 12 and rates[-1] == 190 and len(rates) == 5 and rates == sorted(rates)
    assert auto_rates(50.0, 40.0) == [50.0]  # no gain from concurrency: one rate


def test_a_sweep_is_one_run_whose_show_prints_the_curve_and_its_knee(stub, tmp_path):
    traces = tmp_path / "t"
    proc = load(stub("--token-delay-ms", "1"), traces, "--requests", 20, "--output-len", 8, "--sweep", "40,10,20",
                "--name", "sw")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run,) = runs_of(traces)
    summary = json.loads((run / "summary.json").read_text())
    loads = summary["loads"]
    assert "serving" not in summary and loads["kind"] == "sweep"
    assert [p["plan"]["rate"] for p in loads["parts"]] == [10, 20, 40]
    assert all(p["completed"] == 20 for p in loads["parts"])
    assert loads["knee"]["rate"] in (None, 10, 20, 40)
    tokens = json.loads((run / "load_tokens.json").read_text())
    assert sorted({t["load"] for t in tokens}) == [0, 1, 2] and len(tokens) == 60
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["command"][-2:] == ["--sweep", "40,10,20"]
    shown = roseprof("show", "sw", "--traces-dir", traces, env=ENV80)
    lines = shown.stdout.splitlines()
    assert "knee" in lines[1] and "3 rates 10-40 req/s" in lines[1], lines[:3]
    assert "TTFT p50" in shown.stdout and "done/s" in shown.stdout and "good %" in shown.stdout
    assert max(map(len, lines[:-1])) <= 80, shown.stdout


def test_sweep_auto_finds_its_rates_from_two_probes(stub, tmp_path):
    traces = tmp_path / "t"
    proc = load(stub("--token-delay-ms", "1"), traces, "--requests", 12, "--output-len", 4, "--sweep", "auto",
                "--concurrency", 8)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run,) = runs_of(traces)
    loads = json.loads((run / "summary.json").read_text())["loads"]
    assert [p["concurrency"] for p in loads["probes"]] == [1, 8]
    rates = [p["plan"]["rate"] for p in loads["parts"]]
    assert rates == sorted(rates) and 1 <= len(rates) <= 5
    assert rates[0] == pytest.approx(loads["probes"][0]["requests_s"], rel=0.05)
    assert "found its rates from" in proc.stdout


def test_diff_of_two_sweeps_compares_rate_by_rate_and_gates(stub, tmp_path):
    traces, dash = tmp_path / "t", tmp_path / "d"
    fast, slow = stub("--token-delay-ms", "1"), stub("--token-delay-ms", "4")
    common = ("--requests", 20, "--output-len", 10)
    for url, name, rates in ((fast, "before", "10,20"), (slow, "after", "10,20"), (slow, "other", "15,25")):
        assert load(url, traces, *common, "--sweep", rates, "--name", name).returncode == 0
    proc = roseprof("diff", "before", "after", "--traces-dir", traces, "--dashboards-dir", dash, "--json",
                    "--fail-on-regression", 10)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    names = {m["name"] for m in result["metrics"]}
    assert {"sweep.10/s.itl.p50_ms", "sweep.20/s.itl.p50_ms", "sweep.20/s.throughput.output_tok_s"} <= names
    assert {"sweep.10/s.itl.p50_ms", "sweep.20/s.itl.p50_ms"} <= set(result["regressions"])
    itl = next(m for m in result["metrics"] if m["name"] == "sweep.10/s.itl.p50_ms")
    assert itl["floor_pct"] == 75.0 and itl["ci_low_pct"] > 75.0  # the serving ITL floor, cleared
    shown = roseprof("diff", "before", "after", "--traces-dir", traces, "--dashboards-dir", dash, env=ENV80)
    lines = shown.stdout.splitlines()
    assert any(line.startswith("after is slower") and "ITL p50 @10/s" in line for line in lines), shown.stdout
    assert "@20/s ITL p50" in shown.stdout and "requests" in shown.stdout
    assert max(map(len, lines[:-1])) <= 80
    # the diff's dashboard: curve against curve
    assert any("Sweep: latency by rate" in page.read_text() for page in dash.glob("diff-*.html"))
    # sweeps of no common rate, and a sweep against a single load: one line each
    proc = roseprof("diff", "before", "other", "--traces-dir", traces, "--dashboards-dir", dash)
    assert_one_line_error(proc, 2, "the sweeps share no rate (before 10, 20; after 15, 25 req/s)")
    assert load(fast, traces, *common, "--rate", 10, "--name", "single").returncode == 0
    proc = roseprof("diff", "before", "single", "--traces-dir", traces, "--dashboards-dir", dash)
    assert_one_line_error(proc, 2, "a sweep compares only with a sweep")


def test_open_and_export_a_sweep(stub, tmp_path):
    traces, dash = tmp_path / "t", tmp_path / "d"
    proc = load(stub(), traces, "--requests", 8, "--output-len", 4, "--sweep", "20,40", "--name", "o")
    assert proc.returncode == 0, proc.stderr
    proc = roseprof(
        "open", "o", "--traces-dir", traces, "--dashboards-dir", dash, env={**ENV80, "DISPLAY": ""}
    )
    assert proc.returncode == 0, proc.stderr
    (page,) = dash.glob("*.html")
    assert "Sweep: throughput and latency by rate" in page.read_text()
    out = tmp_path / "sweep.json"
    assert roseprof("export", "o", "--traces-dir", traces, "-o", out).returncode == 0
    events = json.loads(out.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert {n.split(" ", 2)[2] for n in names} == {"at 20 req/s", "at 40 req/s"}
    assert len([e for e in events if e["ph"] == "X"]) == 16


def test_repeat_is_one_run_whose_diff_takes_its_loads_as_a_group(stub, tmp_path):
    traces, dash = tmp_path / "t", tmp_path / "d"
    fast, slow = stub("--token-delay-ms", "1"), stub("--token-delay-ms", "8")  # a wide margin: 3 loads a side
    common = ("--requests", 16, "--concurrency", 4, "--output-len", 10, "--repeat", 3)
    for url, name in ((fast, "before"), (slow, "after")):
        assert load(url, traces, *common, "--name", name).returncode == 0
    run = runs_of(traces)[0]
    loads = json.loads((run / "summary.json").read_text())["loads"]
    assert loads["kind"] == "repeat" and [p["completed"] for p in loads["parts"]] == [16, 16, 16]
    # the same schedule each time: the same lengths in the same order
    assert len({tuple(p["requests"]["max_tokens"]) for p in loads["parts"]}) == 1
    shown = roseprof("show", "before", "--traces-dir", traces, env=ENV80)
    assert shown.stdout.splitlines()[1].startswith("3 loads of one schedule: p99 ITL"), shown.stdout
    proc = roseprof("diff", "before", "after", "--traces-dir", traces, "--dashboards-dir", dash, "--json",
                    "--fail-on-regression", 10)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    assert "groups: 3 before, 3 after" in result["method"]
    assert "serving.itl.p50_ms" in result["regressions"]
    itl = next(m for m in result["metrics"] if m["name"] == "serving.itl.p50_ms")
    assert itl["n_a"] == 16 * 3 * 9  # every gap of all three loads
    assert result["a"]["loads"] == 3 and result["verdict"]["one_run_a_side"] is False
    shown = roseprof("diff", "before", "after", "--traces-dir", traces, "--dashboards-dir", dash, env=ENV80)
    assert "(3 loads: --repeat)" in shown.stdout and "one run a side" not in shown.stdout


def test_a_sweep_repeated_has_k_loads_a_rate_and_diffs_them_as_groups(stub, tmp_path):
    traces, dash = tmp_path / "t", tmp_path / "d"
    fast, slow = stub("--token-delay-ms", "1"), stub("--token-delay-ms", "4")
    common = ("--requests", 10, "--output-len", 8, "--sweep", "20,40", "--repeat", 2)
    for url, name in ((fast, "before"), (slow, "after")):
        assert load(url, traces, *common, "--name", name).returncode == 0
    loads = json.loads((runs_of(traces)[0] / "summary.json").read_text())["loads"]
    assert [p["plan"]["rate"] for p in loads["parts"]] == [20, 20, 40, 40] and loads["repeat"] == 2
    assert [(r["asked_rate"], r["loads"]) for r in loads["curve"]] == [(20, 2), (40, 2)]
    proc = roseprof("diff", "before", "after", "--traces-dir", traces, "--dashboards-dir", dash, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert "groups: 2 before, 2 after" in result["method"] and "one run a side" not in result["method"]
    for rate in (
        "20",
        "40",
    ):  # each rate: both loads' gaps, a group interval (two loads a side: wide, so no gate)
        itl = next(m for m in result["metrics"] if m["name"] == f"sweep.{rate}/s.itl.p50_ms")
        assert itl["n_a"] == 2 * 10 * 7 and itl["ci_low_pct"] is not None and itl["delta_pct"] > 100


@pytest.mark.parametrize(
    "args, text",
    [
        (["--sweep", "5,x"], "--sweep '5,x': 'x' is no rate"),
        (["--sweep", "0"], "each rate is a finite number of requests/s > 0"),
        (["--sweep", "5", "--rate", "3"], "--sweep gives the rates: drop --rate"),
        (["--sweep", "5", "--concurrency", "3"], "--sweep RATES is open loop"),
    ],
)
def test_bad_sweep_and_repeat_options_are_one_line(stub, tmp_path, args, text):
    proc = load(stub(), tmp_path / "t", "--requests", 3, *args)
    assert_one_line_error(proc, 2, text)
    assert not (tmp_path / "t").exists() or not runs_of(tmp_path / "t")


def test_a_diff_of_two_loads_counts_its_tokens_in_requests(stub, tmp_path):
    traces = tmp_path / "t"
    url = stub()
    for name in ("a", "b"):
        assert (
            load(
                url, traces, "--requests", 10, "--concurrency", 2, "--output-len", 6, "--name", name
            ).returncode
            == 0
        )
    shown = roseprof("diff", "a", "b", "--traces-dir", traces, "--dashboards-dir", tmp_path / "d", env=ENV80)
    assert shown.returncode == 0, shown.stderr
    assert "50 tokens in 10 requests" in shown.stdout and "steps" not in shown.stdout.split("method:")[0]


def test_ctrl_c_in_a_sweep_keeps_the_rates_done_as_an_incomplete_run(stub, tmp_path):
    traces = tmp_path / "t"
    proc = subprocess.Popen(
        [sys.executable, "-m", "roseprof", "load", stub("--token-delay-ms", "5"), "--traces-dir", str(traces),
         "--duration", "3", "--sweep", "20,40", "--output-len", "8"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **ENV80},
    )  # fmt: skip
    time.sleep(4.5)  # the first rate done (or nearly), the second under way
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    (line,) = [x for x in err.splitlines() if x.strip()]
    assert "interrupted" in line and "(incomplete)" in line
    (run,) = runs_of(traces)
    assert json.loads((run / "manifest.json").read_text())["status"] == "incomplete"
    loads = json.loads((run / "summary.json").read_text())["loads"]
    assert loads["kind"] == "sweep" and 1 <= len(loads["parts"]) <= 2 and loads["parts"][0]["completed"] >= 1
    shown = roseprof("show", run.name, "--traces-dir", traces, env=ENV80)
    assert shown.returncode == 0 and "incomplete" in shown.stdout


def test_a_server_gone_mid_sweep_keeps_the_rates_done(tmp_path):
    traces = tmp_path / "t"
    server = test_load.Stub("--token-delay-ms", "1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "roseprof", "load", server.url, "--traces-dir", str(traces), "--duration", "2",
         "--sweep", "20,40,80", "--output-len", "4"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **ENV80},
    )  # fmt: skip
    time.sleep(4.5)  # the first rate done, a later one under way or about to start
    server.stop()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "Traceback" not in err and "the run" in err and "is stored" in err
    (run,) = runs_of(traces)
    assert json.loads((run / "manifest.json").read_text())["status"] == "incomplete"
    loads = json.loads((run / "summary.json").read_text())["loads"]
    assert 1 <= len(loads["parts"]) <= 3 and loads["parts"][0]["completed"] >= 1


def test_a_sweep_of_one_rate_is_still_a_sweep(stub, tmp_path):
    traces = tmp_path / "t"
    assert (
        load(stub(), traces, "--requests", 6, "--output-len", 4, "--sweep", "30", "--name", "one").returncode
        == 0
    )
    (run,) = runs_of(traces)
    assert json.loads((run / "summary.json").read_text())["loads"]["kind"] == "sweep"
    shown = roseprof("show", "one", "--traces-dir", traces, env=ENV80)
    assert "1 rate, 30 req/s" in shown.stdout.splitlines()[1]
