"""The diff dashboard: two runs side by side (regions, step and ITL distributions, kernel deltas, metrics)."""

from __future__ import annotations

import html
import os
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from roseprof.analysis.diff import RunData
from roseprof.dashboard.figures import _layout, esc
from roseprof.dashboard.html import ERROR_HOOK, RENDERER_VERSION, STYLE, _script_json

COLORS = {"A": "#636efa", "B": "#ef553b"}


def _region_bars(result: dict) -> go.Figure | None:
    rows = [
        m for m in result["metrics"] if m["name"].startswith("regions.") and m["name"].endswith(".total_ns")
    ]
    if not rows:
        return None
    rows = sorted(rows, key=lambda m: max(m["a"], m["b"]), reverse=True)[:20][::-1]
    names = [esc(m["name"][len("regions.") : -len(".total_ns")]) for m in rows]
    unit = "µs per decode step" if rows[0].get("per_step") else "µs per run"
    fig = go.Figure()
    fig.add_bar(y=names, x=[m["a"] / 1e3 for m in rows], orientation="h", name="A", marker_color=COLORS["A"])
    fig.add_bar(y=names, x=[m["b"] / 1e3 for m in rows], orientation="h", name="B", marker_color=COLORS["B"])
    fig.update_layout(barmode="group", xaxis_title=unit)
    return _layout(fig, "Time per region, A vs B", None, height=max(320, 60 + 40 * len(rows)))


def _overlaid(title: str, xa, xb, xlabel: str) -> go.Figure | None:
    if xa is None or xb is None or not len(xa) or not len(xb):
        return None
    both = np.concatenate([xa, xb])
    lo, hi = float(np.percentile(both, 0.5)), float(np.percentile(both, 99.5))
    bins = {"start": lo, "end": hi, "size": max((hi - lo) / 60, 1e-6)}
    fig = go.Figure()
    for label, x in (("A", xa), ("B", xb)):
        fig.add_histogram(
            x=x,
            name=f"{label} ({len(x)})",
            opacity=0.6,
            histnorm="probability",
            xbins=bins,
            marker_color=COLORS[label],
        )
    fig.update_layout(barmode="overlay", xaxis_title=xlabel, yaxis_title="fraction")
    return _layout(fig, title, "central 99% of both runs shown")


def _kernel_deltas(result: dict) -> go.Figure | None:
    rows = [m for m in result["metrics"] if m["name"].startswith("kernels.") and m["delta_pct"] is not None]
    if not rows:
        return None
    rows = sorted(rows, key=lambda m: abs(m["b"] - m["a"]), reverse=True)[:15][::-1]
    names = [esc(m["name"][len("kernels.") : -len(".total_ns")][:80]) for m in rows]
    fig = go.Figure()
    fig.add_bar(
        y=names,
        x=[(m["b"] - m["a"]) / 1e3 for m in rows],
        orientation="h",
        marker_color=["#d62728" if m["b"] > m["a"] else "#2ca02c" for m in rows],
    )
    fig.update_layout(xaxis_title="B - A (µs per decode step)")
    return _layout(
        fig, "Kernel time change", "largest absolute changes", height=max(320, 60 + 28 * len(rows))
    )


def _metrics_table(result: dict) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("metric", "A", "B", "Δ %", "95% CI", "verdict"))
    rows = []
    for m in result["metrics"]:
        ci = "-" if m["ci_low_pct"] is None else f"[{m['ci_low_pct']:+.1f}, {m['ci_high_pct']:+.1f}]"
        verdict = "REGRESSION" if m.get("regression") else ("significant" if m["significant"] else "")
        d = "-" if m["delta_pct"] is None else f"{m['delta_pct']:+.1f}"
        cells = [html.escape(m["name"]), f"{m['a']:,.3f}", f"{m['b']:,.3f}", d, ci, verdict]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f'<div class="panel"><h2>All metrics (largest significant changes first)</h2><table><tr>{head}</tr>{"".join(rows)}</table></div>'


def render_diff(a: RunData, b: RunData, result: dict, dashboards_dir) -> Path:
    figs = [
        _region_bars(result),
        _overlaid(
            "Decode step time",
            None if a.step_dur is None else a.step_dur / 1e3,
            None if b.step_dur is None else b.step_dur / 1e3,
            "step time (µs)",
        ),
        _overlaid("Inter-token latency", a.itl, b.itl, "ITL (ms)"),
        _kernel_deltas(result),
    ]
    figs = [f for f in figs if f is not None]
    divs = "".join(f'<div class="panel"><div id="fig{i}" class="fig"></div></div>' for i in range(len(figs)))
    specs = "[" + ",".join(pio.to_json(f, validate=False) for f in figs) + "]"
    k = result["kernels"]
    changes = "".join(
        f"<li>{label}: {html.escape(name)} ({t / 1e3:,.1f} µs/step)</li>"
        for label in ("new", "vanished")
        for name, t in k[label][:20]
    )
    gate = ""
    if result["threshold_pct"] is not None:
        gate = f"<b>gate ({result['threshold_pct']}%):</b> " + (
            html.escape(", ".join(result["regressions"])) if result["regressions"] else "no regression"
        )
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>roseprof diff</title>
<meta name="roseprof-renderer" content="{RENDERER_VERSION}"><style>{STYLE}</style><script>{ERROR_HOOK}</script>
<script>{get_plotlyjs()}</script></head>
<body><header><h1>roseprof diff</h1>
<div class="sub">A: {html.escape(result["a"]["id"])} &nbsp; B: {html.escape(result["b"]["id"])}</div></header>
<div id="errors"></div>
<main><div class="panel"><p>{html.escape(result["method"])}</p><p>{gate}</p>{f"<ul>{changes}</ul>" if changes else ""}</div>
{divs}
{_metrics_table(result)}
</main>
<script id="figures" type="application/json">{_script_json(specs)}</script>
<script>
(function () {{
  var specs = JSON.parse(document.getElementById('figures').textContent);
  specs.forEach(function (spec, i) {{ Plotly.newPlot('fig' + i, spec.data, spec.layout, {{responsive: true, displaylogo: false}}); }});
  document.body.setAttribute('data-figures', String(specs.length));
}})();
</script></body></html>
"""
    out = Path(dashboards_dir) / f"diff-{result['a']['id']}-vs-{result['b']['id']}.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, out)
    return out
