"""/metrics checked by real Prometheus components: promtool's linter, and a Prometheus server scraping a server
under load whose TTFT median must bracket what the client measured."""

from __future__ import annotations

import http.client
import json
import shutil
import statistics
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import pytest

from tests.roseinfer.serve.conftest import ServerProcess, free_port

NAMES = (
    "time_to_first_token_seconds inter_token_latency_seconds e2e_request_latency_seconds request_queue_time_seconds "
    "request_prefill_time_seconds request_decode_time_seconds decode_step_seconds iteration_tokens_total "
    "num_requests_running num_requests_waiting kv_cache_usage_perc prompt_tokens_total generation_tokens_total "
    "request_success_total prefix_cache_queries_total prefix_cache_hits_total num_preemptions_total "
    "kv_block_rollovers_total"
).split()

# promtool's lint rejects two things the issue asks for on purpose: the `roseinfer:` prefix (vLLM's convention,
# so dashboards translate; Prometheus reserves colons for recording rules) and `iteration_tokens_total` as a
# histogram's name (vLLM's name). Anything else it reports fails the test, and so does a format error (exit 1).
ACCEPTED_LINT = ("metric names should not contain ':'", 'non-counter metrics should not have "_total" suffix')


def test_every_metric_is_exposed_with_its_model_name(server):
    server.post("/v1/completions", {"prompt": "metrics", "max_tokens": 8, "ignore_eos": True})
    _, headers, text = server.get("/metrics")
    assert headers["content-type"].startswith("text/plain")
    for name in NAMES:
        assert f"roseinfer:{name}" in text, name
    for line in text.splitlines():
        if line.startswith("roseinfer:"):
            labels = line[line.index("{") + 1 : line.index("}")]
            assert {kv.split("=")[0] for kv in labels.split(",")} <= {"model_name", "le", "finished_reason"}
    assert server.metric("roseinfer:generation_tokens_total") >= 8
    assert 'roseinfer:inter_token_latency_seconds_bucket{le="0.0001",model_name="gpt2-tiny"}' in text


def test_token_counters_count_prompts_and_iterations_exactly():
    # A server of its own: its counters start at 0. Two requests of known lengths, one after the other.
    s = ServerProcess().wait_ready()
    try:
        for prompt in ([1, 2, 3, 4, 5], [7] * 9):
            status, _, _ = s.post("/v1/completions", {"prompt": prompt, "max_tokens": 4, "ignore_eos": True})
            assert status == 200
        assert s.metric("roseinfer:prompt_tokens_total") == 5 + 9
        assert s.metric("roseinfer:generation_tokens_total") == 8
        # Every step's computed tokens: the prompts (prefill) and the 8 generated tokens.
        assert s.metric("roseinfer:iteration_tokens_total_sum") == 5 + 9 + 8
    finally:
        s.stop()


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool missing (scripts/install-prometheus.sh)"
)
def test_promtool_checks_the_live_endpoint(server):
    server.post("/v1/completions", {"prompt": "lint", "max_tokens": 4})
    _, _, text = server.get("/metrics")
    out = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert out.returncode in (0, 3), (
        out.stdout + out.stderr
    )  # 3: lint findings, checked below; 1: format error
    findings = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    unexpected = [f for f in findings if not f.endswith(ACCEPTED_LINT)]
    assert unexpected == []


def _prometheus(tmp_path, target_port: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: roseinfer\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n"
    )
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    return proc, f"http://127.0.0.1:{port}"


def _query(base: str, promql: str) -> list:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=30) as resp:
        body = json.load(resp)
    assert body["status"] == "success"
    return body["data"]["result"]


def _stream(port: int, max_tokens: int, first_token: threading.Event | None = None, stop=None) -> float:
    """A streamed request; returns the seconds from sending it to its first token, as the client sees them. With
    `stop`, it hangs up once that is set (a background load that lasts as long as the test needs it)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    body = json.dumps({"prompt": "ttft", "max_tokens": max_tokens, "stream": True, "ignore_eos": True})
    start = time.monotonic()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    first = None
    for line in resp:
        if first is None and line.startswith(b"data: {") and b'"token_ids":[' in line:
            first = time.monotonic() - start
            if first_token is not None:
                first_token.set()
        if stop is not None and stop.is_set():
            break
    conn.close()
    return first


@pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="prometheus missing (scripts/install-prometheus.sh)"
)
def test_prometheus_scrapes_a_ttft_median_that_brackets_the_clients(tmp_path):
    # Every prefill sleeps 1.3 s, so TTFT sits inside the wide (1.0, 2.5] bucket whatever the box's speed and
    # whatever the client's own overhead (up to a second here) adds.
    s = ServerProcess(env={"ROSEINFER_TEST_SLEEP_REGION": "roseinfer.prefill:1300"}).wait_ready()
    prom, base = _prometheus(tmp_path, s.port)
    try:
        # Load: background streams decoding (started first, so no measured request queues behind their prefill)
        # while the measured requests arrive one at a time.
        stop = threading.Event()
        started = [threading.Event() for _ in range(3)]
        background = [threading.Thread(target=_stream, args=(s.port, 1000, e, stop)) for e in started]
        for t in background:
            t.start()
        for e in started:
            assert e.wait(120), "a background stream did not start"
        measured = [_stream(s.port, 4) for _ in range(7)]
        stop.set()
        for t in background:
            t.join(120)
        client_median = statistics.median(measured)
        # Wait until Prometheus has scraped the final counts (10 requests' TTFTs: 7 measured, 3 background).
        count_query = "sum(roseinfer:time_to_first_token_seconds_count)"
        deadline = time.monotonic() + 60
        result = []
        while time.monotonic() < deadline:
            try:
                result = _query(base, count_query)
            except OSError:
                result = []
            if result and float(result[0]["value"][1]) > 9:
                break
            time.sleep(0.5)
        assert result and float(result[0]["value"][1]) > 9, "Prometheus did not scrape the server"
        median = _query(
            base, "histogram_quantile(0.5, sum by (le) (roseinfer:time_to_first_token_seconds_bucket))"
        )
        value = float(median[0]["value"][1])
        # The bucket the server's median falls in, from the bounds the server exposes.
        _, _, text = s.get("/metrics")
        bounds = sorted(
            float(line.split('le="')[1].split('"')[0])
            for line in text.splitlines()
            if line.startswith("roseinfer:time_to_first_token_seconds_bucket") and 'le="+Inf"' not in line
        )
        upper = next(b for b in bounds if b >= value)
        lower = max([b for b in bounds if b < upper], default=0.0)
        assert lower < client_median <= upper, (lower, client_median, upper, measured)
    finally:
        prom.terminate()
        prom.wait(30)
        s.stop()
