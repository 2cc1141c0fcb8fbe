"""The diff dashboard: two runs side by side (regions, step and ITL distributions, kernel deltas, metrics)."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

from roseprof.render.figures import _layout, esc
from roseprof.render.page import figure_divs, page, write_page

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


def _ncu_duration_deltas(result: dict) -> go.Figure | None:
    """ncu runs: each shared kernel's change in mean duration per launch."""
    rows = [
        m
        for m in result["metrics"]
        if m["name"].startswith("ncu.") and m["name"].endswith(".duration_ns") and m["delta_pct"] is not None
    ]
    if not rows:
        return None
    rows = sorted(rows, key=lambda m: abs(m["delta_pct"]), reverse=True)[:15][::-1]
    names = [esc(m["name"][len("ncu.") : -len(".duration_ns")][:80]) for m in rows]
    fig = go.Figure()
    fig.add_bar(
        y=names,
        x=[m["delta_pct"] for m in rows],
        orientation="h",
        marker_color=["#d62728" if m["delta_pct"] > 0 else "#2ca02c" for m in rows],
    )
    fig.update_layout(xaxis_title="B vs A, % change of the mean duration per launch")
    return _layout(fig, "Kernel duration change (Nsight Compute)", None, height=max(320, 60 + 28 * len(rows)))


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


def render_diff(result: dict, samples: dict, dashboards_dir) -> Path:
    """`samples`: {"a"|"b": {"step_ns": [S] or None, "itl_ms": [T] or None}} of the two runs."""
    a, b = samples["a"], samples["b"]
    figs = [
        _region_bars(result),
        _overlaid(
            "Decode step time",
            None if a["step_ns"] is None else a["step_ns"] / 1e3,
            None if b["step_ns"] is None else b["step_ns"] / 1e3,
            "step time (µs)",
        ),
        _overlaid("Inter-token latency", a["itl_ms"], b["itl_ms"], "ITL (ms)"),
        _kernel_deltas(result),
        _ncu_duration_deltas(result),
    ]
    figs = [f for f in figs if f is not None]
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
    main = f"""<div class="panel"><p>{html.escape(result["method"])}</p><p>{gate}</p>{f"<ul>{changes}</ul>" if changes else ""}</div>
{figure_divs(len(figs))}
{_metrics_table(result)}
"""
    sub = f"A: {_side(result['a'])}   B: {_side(result['b'])}"
    out = Path(dashboards_dir) / f"diff-{_file_side(result['a'])}-vs-{_file_side(result['b'])}.html"
    return write_page(page("roseprof diff", "roseprof diff", sub, main, figs), out)


def _side(side: dict) -> str:
    """A side of the diff by its latest run's id, and how many runs its group has beyond that one."""
    more = len(side.get("runs") or []) - 1
    return f"{side['id']} + {more} more" if more > 0 else side["id"]


def _file_side(side: dict) -> str:
    n = len(side.get("runs") or [])
    return f"{side['id']}-x{n}" if n > 1 else side["id"]
