"""A stored load as `export` and `open` give it (`roseprof load` against the stub server, as test_load.py runs it):
one trace track per request with its tokens, the load dashboard, and its ITL CDF thinned with its tail whole."""

from __future__ import annotations

import json

from tests.helpers import roseprof
from tests.roseprof import test_load
from tests.roseprof.test_load import ENV80, load

stub = test_load.stub  # the fixture: the stub server on a free port


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
