"""A load's dashboard figures (roseprof load): TTFT and ITL distributions (CDF), latency over the run's time with
the arrivals, requests in flight over time, and the request waterfall. From the `serving` part and the per-token
table alone; large loads are thinned in the waterfall (the subtitle says so), never in the tables."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from roseprof.render.figures import figure, layout

WATERFALL_MAX = 400  # requests drawn in the waterfall
# A CDF's line through at most this many of its points spread evenly by rank, and every point of its top 1% (the
# tail a reader looks at on the log axis): a load of 44,627 ITLs drew them all, half the page's bytes.
CDF_POINTS = 2000
CDF_TAIL = 0.01


def _cdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v = np.sort(values)
    y = np.arange(1, len(v) + 1) / len(v)
    if len(v) <= CDF_POINTS:
        return v, y
    tail = int(np.ceil(len(v) * CDF_TAIL))
    body = np.linspace(0, len(v) - tail - 1, CDF_POINTS).round().astype(np.int64)
    keep = np.unique(np.concatenate([body, np.arange(len(v) - tail, len(v))]))
    return v[keep], y[keep]


def figures(serving: dict, tokens: list | None) -> list:
    rows = serving["requests"]
    ok = [i for i, (s, w) in enumerate(zip(rows["status"], rows["warmup"])) if s == "ok" and not w]
    out = []
    ttft = np.asarray([rows["ttft_ms"][i] for i in ok if rows["ttft_ms"][i] is not None], dtype=np.float64)
    itl = np.concatenate(
        [np.diff(np.asarray(r["t_ms"], dtype=np.float64)) for r in tokens or [] if len(r["t_ms"]) > 1]
        or [np.zeros(0)]
    )
    if ttft.size or itl.size:
        fig = figure()
        thinned = []
        for label, v in (("TTFT", ttft), ("ITL", itl)):
            if v.size:
                x, y = _cdf(v)
                fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=f"{label} ({v.size:,})"))
                if len(x) < v.size:
                    thinned.append(f"{label} through {len(x):,} of its {v.size:,} points")
        fig.update_xaxes(title="ms", type="log")
        fig.update_yaxes(title="fraction at or below")
        note = f"{', '.join(thinned)}: evenly by rank, and every point of its top 1%" if thinned else None
        out.append(layout(fig, "TTFT and ITL distributions (CDF, client clock)", note))
    sent = [(rows["sent_ms"][i], rows["ttft_ms"][i], rows["e2e_ms"][i]) for i in ok]
    if sent:
        t, ttft_t, e2e_t = (np.asarray(c, dtype=np.float64) for c in zip(*sent))
        fig = figure()
        fig.add_trace(go.Scatter(x=t / 1e3, y=ttft_t, mode="markers", name="TTFT", marker={"size": 4}))
        fig.add_trace(go.Scatter(x=t / 1e3, y=e2e_t, mode="markers", name="E2E", marker={"size": 4}))
        fig.add_trace(go.Histogram(x=t / 1e3, name="arrivals", yaxis="y2", opacity=0.3, nbinsx=60))
        fig.update_layout(yaxis2={"overlaying": "y", "side": "right", "title": "arrivals"})
        fig.update_xaxes(title="seconds since the load started (by send time)")
        fig.update_yaxes(title="ms")
        out.append(layout(fig, "Latency over the run, with arrivals"))
    spans = [
        (s, e)
        for s, e in ((r.get("sent_ms"), r.get("end_ms")) for r in tokens or [])
        if s is not None and e is not None
    ]
    if spans:
        edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
        x, y, level = [0.0], [0], 0
        for when, step in edges:
            level += step
            x.append(when / 1e3)
            y.append(level)
        fig = figure(go.Scatter(x=x, y=y, mode="lines", line={"shape": "hv"}, name="in flight"))
        fig.update_xaxes(title="seconds since the load started")
        fig.update_yaxes(title="requests in flight")
        out.append(layout(fig, "Concurrency over time"))
    if tokens:
        shown = tokens[:WATERFALL_MAX]
        fig = figure()
        for r in shown:
            if r.get("sent_ms") is None or r.get("end_ms") is None:
                continue
            fig.add_trace(go.Scatter(x=[r["sent_ms"] / 1e3, r["end_ms"] / 1e3], y=[r["index"]] * 2, mode="lines",
                                     line={"color": "#9ab"}, showlegend=False, hoverinfo="skip"))  # fmt: skip
        xs = [round(t / 1e3, 6) for r in shown for t in r["t_ms"]]  # s to the µs: not 18 digits a dot
        ys = [r["index"] for r in shown for _ in r["t_ms"]]
        fig.add_trace(go.Scattergl(x=xs, y=ys, mode="markers", marker={"size": 3}, name="tokens"))
        fig.update_xaxes(title="seconds since the load started")
        fig.update_yaxes(title="request", autorange="reversed")
        note = (
            f"the first {WATERFALL_MAX} of {len(tokens):,} requests" if len(tokens) > WATERFALL_MAX else None
        )
        out.append(layout(fig, "Request waterfall (sent to end; a dot per token)", note, height=500))
    return out


def loads_curve(rows: list[dict], x: list[float], x_title: str, knee_x: float | None = None) -> go.Figure:
    """Several loads' throughput (bars, left axis) and latency percentiles (lines, right axis) against their rate
    asked (a sweep: the throughput-latency curve, its knee marked) or their number (a repeat)."""
    fig = figure()
    fig.add_trace(go.Bar(x=x, y=[r["output_tok_s"] for r in rows], name="output tok/s", opacity=0.35))
    for key, label in (("ttft_p50_ms", "TTFT p50"), ("ttft_p99_ms", "TTFT p99"), ("itl_p50_ms", "ITL p50"),
                       ("itl_p99_ms", "ITL p99")):  # fmt: skip
        fig.add_trace(go.Scatter(x=x, y=[r[key] for r in rows], mode="lines+markers", name=label, yaxis="y2"))
    fig.update_layout(yaxis2={"overlaying": "y", "side": "right", "title": "ms", "type": "log"})
    fig.update_xaxes(title=x_title)
    fig.update_yaxes(title="output tokens/s")
    if knee_x is not None:
        fig.add_vline(x=knee_x, line_dash="dash", annotation_text="knee")
    return fig


def several(loads: dict, tokens: list | None) -> list:
    """A run of several loads (roseprof load --sweep / --repeat): the curve, then one load's own figures (a
    sweep's knee, else its highest rate; a repeat's first load)."""
    from roseprof.load.sweep import curve_row

    parts = loads["parts"]
    if loads["kind"] == "sweep":
        rows = sorted(loads["curve"], key=lambda r: r["asked_rate"])
        knee = loads["knee"]
        knee_rate = knee["rate"] if knee.get("saturated") else None
        fig = loads_curve(rows, [r["asked_rate"] for r in rows], "rate asked (requests/s)", knee_rate)
        title = "Sweep: throughput and latency by rate" + (
            f" (knee {knee_rate:g} req/s)" if knee_rate else ""
        )
        rate = knee["rate"] if knee.get("rate") is not None else rows[-1]["asked_rate"]
        shown = next(k for k, p in enumerate(parts) if p["plan"]["rate"] == rate)  # its first load
        which = f"at {rate:g} req/s"
    else:
        rows = [curve_row(p) for p in parts]
        fig = loads_curve(rows, list(range(1, len(rows) + 1)), "load (same schedule)")
        title, shown, which = f"{len(rows)} loads of one schedule", 0, "load 1"
    out = [layout(fig, title)]
    for f in figures(parts[shown], [r for r in tokens or [] if r.get("load") == shown]):
        head, br, note = f.layout.title.text.partition("<br>")
        f.update_layout(title={"text": f"{head} — {which}{br}{note}"})
        out.append(f)
    return out


def sweep_diff(metrics: list[dict]) -> list:
    """A diff of two sweeps, curve against curve (from the diff's own metrics, sweep.RATE/s.*: the rates both
    sides measured): TTFT p50 and ITL p50 before and after by rate, and the output throughput."""
    by_rate: dict[float, dict] = {}
    for m in metrics:
        if "rate" in m:
            by_rate.setdefault(m["rate"], {})[m["name"].split("/s.", 1)[1]] = m
    if not by_rate:
        return []
    rates = sorted(by_rate)
    fig = figure()
    for key, label in (("ttft.p50_ms", "TTFT p50"), ("itl.p50_ms", "ITL p50")):
        for side, dash in (("a", "dash"), ("b", "solid")):
            ys = [by_rate[r].get(key, {}).get(side) for r in rates]
            fig.add_trace(go.Scatter(x=rates, y=ys, mode="lines+markers", line={"dash": dash},
                                     name=f"{label} {'before' if side == 'a' else 'after'}"))  # fmt: skip
    fig.update_xaxes(title="rate asked (requests/s)")
    fig.update_yaxes(title="ms", type="log")
    tput = figure()
    for side, name in (("a", "before"), ("b", "after")):
        ys = [by_rate[r].get("throughput.output_tok_s", {}).get(side) for r in rates]
        tput.add_trace(go.Bar(x=[f"{r:g}" for r in rates], y=ys, name=name))
    tput.update_xaxes(title="rate asked (requests/s)")
    tput.update_yaxes(title="output tokens/s")
    return [layout(fig, "Sweep: latency by rate, before (dashed) and after"),
            layout(tput, "Sweep: output throughput by rate")]  # fmt: skip
