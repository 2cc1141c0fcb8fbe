"""Exemplars: /metrics in OpenMetrics (asked for by the scraper's Accept header) carries a request id on the
request histograms' buckets, and that id is a request `roseprof request` opens in a `roseprof live` run of the same
server; the classic text format carries none."""

from __future__ import annotations

import numpy as np
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from roseinfer.serve.metrics import Histogram
from roseprof.run.tables import read_load_tokens
from tests.helpers import roseprof
from tests.roseinfer.serve.conftest import ServerProcess

ENV = {"COLUMNS": "80"}
OPENMETRICS = "application/openmetrics-text; version=1.0.0"
REQUEST_HISTOGRAMS = (
    "roseinfer:time_to_first_token_seconds",
    "roseinfer:inter_token_latency_seconds",
    "roseinfer:e2e_request_latency_seconds",
)


def test_each_bucket_keeps_the_latest_request_and_its_largest_value_there():
    h = Histogram("x_seconds", "x", [0.001, 0.01])
    h.observe_many(np.array([0.0002, 0.0009, 0.005, 0.5]), "cmpl-a")
    h.observe(0.0004, "cmpl-b")
    ex = h.snapshot()[3]
    assert [(e[0], e[1]) for e in ex] == [("cmpl-b", 0.0004), ("cmpl-a", 0.005), ("cmpl-a", 0.5)]
    assert h.counts == [3, 1, 1]


def test_an_exemplar_is_a_request_of_a_live_run(tmp_path):
    server = ServerProcess("--max-batch-size", "8").wait_ready()
    try:
        proc = roseprof(
            "live", server.url, "--steps", "3000", "--requests", "8", "--concurrency", "4", "--prompt-len", "8",
            "--output-len", "12", "--traces-dir", tmp_path, "--name", "ex", env=ENV,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        status, headers, text = server.get("/metrics", headers={"Accept": OPENMETRICS})
        assert status == 200 and headers["content-type"].startswith("application/openmetrics-text")
        _, _, classic = server.get("/metrics")
    finally:
        server.stop()
    assert "# {" not in classic  # the classic format has no exemplars
    families = {f.name: f for f in text_string_to_metric_families(text)}  # parses, or raises
    (folder,) = list(tmp_path.iterdir())
    ids = {row["request_id"] for row in read_load_tokens(folder)}
    found = {}
    for name in REQUEST_HISTOGRAMS:
        exemplars = [s.exemplar for s in families[name].samples if s.exemplar is not None]
        assert exemplars, name
        for e in exemplars:
            assert e.labels["request_id"] in ids, (name, e)  # every one is a request of the load
        found[name] = exemplars[-1].labels["request_id"]  # the slowest bucket's request
    rid = found["roseinfer:inter_token_latency_seconds"]
    opened = roseprof("request", folder.name, rid, "--traces-dir", tmp_path, env=ENV)
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout.splitlines()[0].startswith(f"request {rid}")
