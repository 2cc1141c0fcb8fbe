"""`roseprof live` against a real `roseinfer serve` (gpt2-tiny on CPU), with planted causes: a long prompt in every
few requests, and a region slowed on one decode step in 50. The requests hit come first, with the step and the
cause. (A busy 2-core box stalls a step now and then by as much as a long prefill: the prefill's requests must
be one of the first two.) The HTTP path and the slowest-requests list on records built here, with no server:
test_live_http_path.py and test_live_slowest.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers import assert_one_line_error, roseprof
from tests.roseinfer.serve.conftest import ServerProcess

ENV = {"COLUMNS": "80"}
LONG_TOKENS = 1000  # gpt2-tiny's byte tokenizer: one token a byte (its context: 1024)


@pytest.fixture(scope="module")
def live_run(tmp_path_factory):
    """(server, traces folder, the live run's folder, its show output)."""
    tmp = tmp_path_factory.mktemp("live")
    dataset = tmp / "prompts.jsonl"
    # 1 long prompt in 4, in the seeded order roseprof load draws them; each of other bytes, so that the server's
    # prefix cache leaves every one's prefill whole (three alike left the later two a few dozen tokens to compute)
    lines = [
        {"prompt": "xyz"[i // 4] * LONG_TOKENS if i % 4 == 0 else f"short {i}", "output_len": 16}
        for i in range(12)
    ]
    dataset.write_text("".join(json.dumps(line) + "\n" for line in lines))
    server = ServerProcess("--max-batch-size", "8", "--api-key", "k").wait_ready()
    try:
        traces = tmp / "traces"
        proc = roseprof(
            "live", server.url, "--steps", "3000", "--requests", "12", "--concurrency", "4",
            "--dataset", dataset, "--api-key", "k", "--traces-dir", traces, "--name", "planted", env=ENV,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        (folder,) = [p for p in traces.iterdir() if "planted" in p.name]
        yield server, traces, folder, proc.stdout
    finally:
        server.stop()


def _prefill_tokens(line: str) -> int:
    """N of "... step K admitted a N-token prefill (...)"."""
    return int(line.split("admitted a ")[1].split("-token")[0]) if "admitted a " in line else 0


def test_live_names_the_requests_hit_by_the_long_prefill_first(live_run):
    _, _, folder, out = live_run
    summary = json.loads((folder / "summary.json").read_text())
    part = summary["live"]
    assert part["join"]["joined"] > 0 and part["join"]["outside_window"] == 0
    worst_itl = [e for e in part["slowest"] if e["by"] == "itl"]
    # the ones whose step's gap held a long prompt's prefill, named as such
    by_prefill = [
        e for e in worst_itl if e["cause"] == "prefill" and _prefill_tokens(e["line"]) >= LONG_TOKENS
    ]
    assert by_prefill and by_prefill[0] in worst_itl[:2], [e["line"] for e in worst_itl]
    # show starts with the slowest requests: the first line after the run's id, the prefill named among them
    assert out.splitlines()[1].startswith("req cmpl-"), out[:800]
    head = " ".join(" ".join(out.splitlines()[1:24]).split())  # the lines as wrapped at 80 columns, joined
    assert f"{by_prefill[0]['request_id']}: ITL" in head and "admitted a" in head
    # the server side is in the same run: its steps and spike causes
    assert summary["steps"]["count"] > 0 and summary["serving"]["completed"] == 12
    # a server without --enable-profiling: the flight recorder's steps alone, which time no region (said once)
    assert [w for w in summary["warnings"] if "carry no region times" in w], summary["warnings"]


def test_request_timeline(live_run):
    _, traces, folder, _ = live_run
    part = json.loads((folder / "summary.json").read_text())["live"]
    rid = part["slowest"][0]["request_id"]
    proc = roseprof("request", folder.name, rid, "--traces-dir", traces, env=ENV)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"request {rid}")
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert any(line.strip().startswith("queued") for line in lines)
    assert any(line.strip().startswith("prefill") for line in lines)
    assert len([line for line in lines if line.strip()[:1].isdigit()]) == 16  # one line a token
    bad = roseprof("request", folder.name, "cmpl-nope", "--traces-dir", traces, env=ENV)
    assert_one_line_error(bad, 2, "no request 'cmpl-nope'")


def test_import_of_debug_steps_makes_a_run(live_run, tmp_path):
    server, _, _, _ = live_run
    status, _, text = server.get("/debug/steps?last=20", headers={"Authorization": "Bearer k"})
    assert status == 200
    saved = tmp_path / "steps.jsonl"
    saved.write_text(text)
    proc = roseprof(
        "import", saved, "--traces-dir", tmp_path / "traces", "--dashboards-dir", tmp_path, env=ENV
    )
    assert proc.returncode == 0, proc.stderr
    assert "decode steps: 20" in proc.stdout
    (run,) = list((tmp_path / "traces").iterdir())
    assert json.loads((run / "manifest.json").read_text())["tool"]["name"] == "steps"


def test_live_with_no_server_is_one_line_and_stores_nothing(tmp_path):
    proc = roseprof("live", "http://127.0.0.1:9", "--steps", "10", "--requests", "1",
                    "--traces-dir", tmp_path, env=ENV)  # fmt: skip
    assert_one_line_error(proc, 2, "/debug/steps")
    assert not Path(tmp_path).exists() or not any(Path(tmp_path).iterdir())


def test_live_run_opens_as_a_dashboard(live_run, tmp_path):
    _, traces, folder, _ = live_run
    proc = roseprof("open", folder.name, "--traces-dir", traces, "--dashboards-dir", tmp_path, env=ENV)
    assert proc.returncode == 0, proc.stderr
    (page,) = list(tmp_path.glob("*.html"))
    assert "req cmpl-" in page.read_text()


def live_of_a_slowed_server(tmp_path, env: dict, name: str, *server_args: str) -> tuple:
    """`roseprof live` (20 requests over 4 streams) of a CPU server started with `env` (a planted slowdown) and
    --enable-profiling, nothing else: (run folder, its summary, the request named first by its worst ITL). The
    planted slowdown turns no region clock on; the steps window that `roseprof live --tool steps` opens does, for
    its own steps only (the window covers the whole load)."""
    server = ServerProcess("--max-batch-size", "8", "--enable-profiling", *server_args, env=env).wait_ready()
    try:
        proc = roseprof(
            "live", server.url, "--steps", "3000", "--requests", "20", "--concurrency", "4", "--prompt-len", "8",
            "--output-len", "24", "--traces-dir", tmp_path, "--name", name, env=ENV,
        )  # fmt: skip
    finally:
        server.stop()
    assert proc.returncode == 0, proc.stderr
    (folder,) = list(tmp_path.iterdir())
    summary = json.loads((folder / "summary.json").read_text())
    capture = summary["live"]["capture"]
    assert capture["tool"] == "steps" and capture["first_step"] == 0, capture  # from the load's first step
    return folder, summary, [e for e in summary["live"]["slowest"] if e["by"] == "itl"][0]


def test_live_names_the_step_a_region_slowed_one_in_50(tmp_path):
    """The engine's decode-step region made slow (CPU time) on one decode step in 50: the requests in those steps
    come first, blamed on that step and that region."""
    env = {"ROSEINFER_TEST_BUSY_REGION": "roseinfer.decode_step:400", "ROSEINFER_TEST_SLOW_EVERY": "50"}
    # 400 ms of CPU time: far above what a busy box's scheduling adds to any other step (150 ms was not, once)
    _, summary, worst = live_of_a_slowed_server(tmp_path, env, "region")
    part = summary["live"]
    assert worst["step"] % 50 == 49, part[
        "slowest"
    ]  # the 50th, 100th, ... entry of the region: steps 49, 99, ...
    # the step's own cause (what else it did, e.g. a batch change), and the region that grew
    assert "roseinfer.decode_step +" in worst["line"], worst


def test_live_with_no_load_stores_the_servers_steps_alone(live_run, tmp_path):
    server, _, _, _ = live_run
    proc = roseprof("live", server.url, "--steps", "20", "--api-key", "k", "--traces-dir", tmp_path, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert "decode steps: 20" in proc.stdout
    wrong = roseprof(
        "live", server.url, "--steps", "20", "--api-key", "no", "--traces-dir", tmp_path, env=ENV
    )
    assert_one_line_error(wrong, 2, "API key")


def test_live_splits_ttft_on_one_clock_for_a_server_on_this_host(live_run):
    _, _, folder, out = live_run
    path = json.loads((folder / "summary.json").read_text())["live"]["path"]
    assert path["clocks_agree"] and path["requests"] == 12
    assert path["tokens"] == 12 * 16  # every client token found its emission by the server
    for part in ("http_in_ms", "engine_ttft_ms", "first_delivery_ms", "delivery_ms", "gap_diff_ms"):
        assert path[part]["p50"] is not None and path[part]["p50"] <= path[part]["p99"], part
    # on one clock, the server took a request after the client sent it and emitted a token before it was read
    assert path["http_in_ms"]["p50"] > 0 and path["delivery_ms"]["p50"] > 0
    # the engine part split at the start of each request's prefill: both parts there, neither negative
    for part in ("queue_ms", "prefill_ms"):
        assert 0 <= path[part]["p50"] <= path[part]["p99"] <= path["engine_ttft_ms"]["p99"], part
    assert 0 <= path["busy_at_arrival"] <= 1
    assert "HTTP path on one clock (server on this host, 12 requests)" in out
    assert "queue (-> its prefill started)" in out


@pytest.mark.browser
def test_live_dashboard_draws_and_a_click_on_a_request_marks_its_steps(live_run, tmp_path):
    """The request waterfall above the step timeline, in headless Chromium: every figure drawn, no JavaScript error;
    a click on a request's bar marks the decode steps its tokens came from."""
    from roseprof.render.headless import chromium_page, find_chromium, load_dashboard
    from roseprof.render.live_figures import PICKED

    if find_chromium() is None:
        pytest.skip("needs Chromium (scripts/install-chromium.sh)")
    _, traces, folder, _ = live_run
    proc = roseprof("open", folder.name, "--traces-dir", traces, "--dashboards-dir", tmp_path, env=ENV)
    assert proc.returncode == 0, proc.stderr
    (page_path,) = list(tmp_path.glob("*.html"))
    with chromium_page() as page:
        result = load_dashboard(page, str(page_path))
        assert result["errors"] == [] and result["declared"] >= 2
        assert all(f["drawn"] and f["traces"] > 0 and f["points"] > 0 for f in result["figures"]), result
        assert "Requests (client) above the server" in result["text"]
        assert "client and server on one clock" in result["text"]  # a server on this host: no shift guessed
        # the first figure is the waterfall: click the decode bar of a request and read the steps' colours back
        fig = page.query_selector("#fig0")
        fig.scroll_into_view_if_needed()
        page.eval_on_selector(
            "#fig0",
            """gd => { const i = gd.data.findIndex(t => t.name === 'decode');
                       gd.emit('plotly_click', {points: [{customdata: gd.data[i].customdata[0]}]}); }""",
        )
        picked = page.eval_on_selector("#fig0", "gd => gd.getAttribute('data-picked')")
        marked = page.eval_on_selector(
            "#fig0",
            f"""gd => {{ const t = gd.data.find(t => t.meta && t.meta.role === 'steps');
                        return t.marker.color.filter(c => c === '{PICKED}').length; }}""",
        )
        assert page.evaluate("() => window.__dashboardErrors || []") == []
    part = json.loads((folder / "summary.json").read_text())["live"]
    rows = {r["request_id"]: r for r in _tokens(folder)}
    assert picked in rows
    first = part["window"]["first_step"]
    assert marked == len({s for s in rows[picked]["steps"] if s is not None and s >= first})


def _tokens(folder: Path) -> list[dict]:
    from roseprof.run.tables import read_load_tokens

    return read_load_tokens(folder)


def _load_span(folder: Path) -> tuple[int, int]:
    """The server's steps of the run's first and last decode tokens, from its client tokens."""
    steps = [s for row in _tokens(folder) for s in row["steps"] if s is not None and s >= 0]
    return min(steps), max(steps)


def _live_again(server, tmp_path, *args: str, output_len: str = "16") -> tuple[Path, dict, str]:
    """A second `roseprof live` of the fixture's server (whose flight recorder holds the fixture's load): (run
    folder, summary, show output)."""
    proc = roseprof(
        "live", server.url, *args, "--requests", "4", "--concurrency", "2", "--prompt-len", "8",
        "--output-len", output_len, "--api-key", "k", "--traces-dir", tmp_path, env=ENV,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (folder,) = list(tmp_path.iterdir())
    return folder, json.loads((folder / "summary.json").read_text()), proc.stdout


def test_a_second_load_reports_its_own_steps_not_the_earlier_loads(live_run, tmp_path):
    """The server's recorder still holds the fixture's load: the second load's step figures, slowest requests and
    `roseprof request` are its own steps', the earlier ones counted as left out and kept in raw/."""
    server = live_run[0]
    folder, summary, out = _live_again(server, tmp_path, "--steps", "3000")
    first, last = _load_span(folder)
    window = summary["live"]["window"]
    assert (window["first_step"], window["steps"]) == (first, last - first + 1)
    assert summary["steps"]["count"] == last - first + 1  # not the recorder's every step
    assert f"decode steps: {last - first + 1}  " in out
    # the steps show names are the load's, by the server's number (what the client's tokens and `request` say)
    assert all(first <= int(k) <= last for k in re.findall(r"decode step (\d+)", out)), out
    # every step before the load's first token is the fixture's load (and any other test's): left out, and said
    assert window["before"] == first > 0 and window["snapshot"] == last + 1 + window["after"]
    said = " ".join(out.split())
    assert f"the snapshot held {window['before'] + window['after']} more (not the load's: " in said
    raw = (folder / "raw" / "steps.jsonl").read_text().splitlines()
    assert (
        sum('"type":"step"' in line for line in raw) == window["snapshot"]
    )  # the snapshot as the server sent it
    # the ITL figures are the load's tokens': 4 requests of 16 tokens, each first one a prefill's
    assert summary["itl"]["count"] == 4 * 15
    assert all(first <= e["step"] <= last for e in summary["live"]["slowest"] if e["by"] == "itl")
    rid = summary["live"]["slowest"][0]["request_id"]
    proc = roseprof("request", folder.name, rid, "--traces-dir", tmp_path, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert "outside the window" not in proc.stdout


def test_steps_caps_the_loads_steps_at_n(live_run, tmp_path):
    """--steps 10 on a load of more steps: the last 10 of them (the help's word), the older tokens said."""
    folder, summary, out = _live_again(live_run[0], tmp_path, "--steps", "10")
    first, last = _load_span(folder)
    window = summary["live"]["window"]
    assert window["snapshot"] == 10 and window["before"] == 0
    assert summary["steps"]["count"] == window["steps"] == 10 - window["after"]
    assert window["first_step"] + window["steps"] - 1 == last
    assert summary["live"]["join"]["outside_window"] > 0
    assert [w for w in summary["warnings"] if "give --steps more" in w], summary["warnings"]


def test_a_load_of_no_decode_token_keeps_its_ttft_lines(live_run, tmp_path):
    """--output-len 1: each request's one token is its prefill's, so the load has no decode step of its own; its
    requests and prefills are still the run's (show's TTFT lines, the HTTP path, `request`, the dashboard), and
    the warning says why there is no step, not that the recorder lost the load."""
    traces = tmp_path / "traces"
    folder, summary, out = _live_again(live_run[0], traces, "--steps", "3000", output_len="1")
    assert [w for w in summary["warnings"] if "the load streamed no decode token" in w], summary["warnings"]
    assert not [w for w in summary["warnings"] if "held no decode step" in w], summary["warnings"]
    part = summary["live"]
    ttft = [e for e in part["slowest"] if e["by"] == "ttft"]
    assert len(ttft) == 4 and all(e["cause"] in ("queued", "prefill", "http") for e in ttft), ttft
    assert part["join"]["prefill"] == 4 and part["path"]["requests"] == 4
    said = " ".join(out.split())
    assert f"req {ttft[0]['request_id']}: TTFT" in said and "-token prefill" in said
    assert "no server step of the load" in said
    # `request` and the dashboard read the same cut: the load's request, with its queue and prefill
    proc = roseprof("request", folder.name, ttft[0]["request_id"], "--traces-dir", traces, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert "queued" in proc.stdout and "before the server's recorder held" not in proc.stdout
    pages = tmp_path / "pages"
    proc = roseprof("open", folder.name, "--traces-dir", traces, "--dashboards-dir", pages, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert f"req {ttft[0]['request_id']}" in next(pages.glob("*.html")).read_text()
