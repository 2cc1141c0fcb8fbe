"""Figures of a run of several ranks, from summary.json's `collectives` part (analysis/sections/collectives.py).

The arrival-spread heatmap: one row per rank, one column per decode step, each cell the rank's lateness summed
over the step's collectives (its arrival after the first rank's, ms). A straggler is a bright row; one rank's
bad step a bright cell. Long runs are binned to at most MAX_STEP_BARS columns (mean per bin), as the step figures.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from roseprof.render.figures import figure, layout
from roseprof.render.step_figures import MAX_STEP_BARS
from roseprof.render.units import region_name


def arrival_heatmap(summary: dict) -> go.Figure | None:
    c = summary.get("collectives") or {}
    h = c.get("heatmap")
    if not h or not h["steps"]:
        return None
    late = np.asarray(h["late_ms"], dtype=np.float64)  # [P, S]
    steps = np.asarray(h["steps"], dtype=np.int64)  # [S]
    edges = np.linspace(0, len(steps), min(len(steps), MAX_STEP_BARS) + 1).astype(np.int64)
    binned = len(edges) - 1 < len(steps)
    if binned:
        late = np.stack([late[:, a:b].mean(axis=1) for a, b in zip(edges[:-1], edges[1:])], axis=1)
        steps = steps[edges[:-1]]
    who = "rank" if c.get("rank_known", True) else "process"
    fig = figure(
        go.Heatmap(
            z=late,
            x=steps,
            y=[f"{who} {r}" for r in h["ranks"]],
            colorscale="Viridis",
            colorbar={"title": "late ms"},
            hovertemplate="step %{x}<br>%{y}<br>late %{z:.3f} ms<extra></extra>",
        )
    )
    fig.update_xaxes(title="decode step" + (" (first of each bin)" if binned else ""))
    fig.update_yaxes(autorange="reversed")  # rank 0 on top
    note = "each rank's arrival after the first rank's, summed over the step's collectives"
    if binned:
        note += f"; {len(h['steps']):,} steps in {len(edges) - 1:,} bins (mean)"
    s = c.get("straggler")
    if s and s.get("clear", True):
        note += f"; straggler: rank {s['rank']}" + (
            f", {s['where']}"
            if s.get("where")
            else f", extra time in {s['region']}"
            if s.get("region")
            else ""
        )
    elif s:
        note += "; no clear straggler (the ranks take turns arriving last)"
    return layout(fig, "Arrival spread per rank and decode step", note, height=160 + 40 * len(h["ranks"]))


def step_lanes(steps: dict | None) -> go.Figure | None:
    """One lane per rank: each rank's decode step times over the step index (steps.json's per-rank rows), so a rank
    whose steps run long, or one bad step on one rank, stands out beside the others. Click a legend entry to hide a
    rank, double-click to see it alone."""
    ranks = (steps or {}).get("ranks") or {}
    if len(ranks) < 2:
        return None
    fig = figure()
    for label, rows in ranks.items():
        index = np.asarray(rows.get("index") or [], dtype=np.int64)  # [S]
        dur_ms = np.asarray(rows.get("dur_ns") or [], dtype=np.float64) / 1e6  # [S]
        if len(index) != len(dur_ms) or not len(index):
            continue
        if len(index) > MAX_STEP_BARS:  # a long run: every k-th step, the lanes stay comparable
            keep = np.linspace(0, len(index) - 1, MAX_STEP_BARS).astype(np.int64)
            index, dur_ms = index[keep], dur_ms[keep]
        fig.add_trace(
            go.Scattergl(
                x=index,
                y=dur_ms,
                mode="lines",
                name=label,
                hovertemplate=f"{label}<br>step %{{x}}: %{{y:.3f}} ms",
            )
        )
    if not fig.data:
        return None
    fig.update_xaxes(title="decode step")
    fig.update_yaxes(title="step ms", rangemode="tozero")
    return layout(
        fig, "Decode step time per rank", "each rank's own decode steps, joined to its own step log"
    )


def rank_regions(summary: dict, top: int = 10) -> go.Figure | None:
    """Own time per region on each rank, with a rank selector: all ranks side by side, or one rank alone. The
    regions are the `top` with the most own time over all ranks (summary.json's per-rank region tables)."""
    entries = [e for e in summary.get("ranks") or [] if e.get("regions")]
    if len(entries) < 2:
        return None
    own: dict[str, float] = {}
    for e in entries:
        for r in e["regions"]:
            own[region_name(r)] = own.get(region_name(r), 0.0) + r["self_ns"]
    names = sorted(own, key=own.get, reverse=True)[:top][::-1]  # largest on top of a horizontal bar chart
    fig = figure()
    for e in entries:
        by_name = {region_name(r): r["self_ns"] for r in e["regions"]}
        fig.add_trace(
            go.Bar(
                y=names,
                x=[by_name.get(n, 0) / 1e6 for n in names],
                orientation="h",
                name=e["label"],
                hovertemplate=f"{e['label']}<br>%{{y}}: %{{x:.3f}} ms own<extra></extra>",
            )
        )
    n = len(entries)
    buttons = [{"label": "all ranks", "method": "update", "args": [{"visible": [True] * n}]}] + [
        {"label": e["label"], "method": "update", "args": [{"visible": [i == j for j in range(n)]}]}
        for i, e in enumerate(entries)
    ]
    fig.update_layout(
        barmode="group",
        updatemenus=[{"buttons": buttons, "direction": "down", "x": 1.0, "xanchor": "right", "y": 1.15}],
    )
    fig.update_xaxes(title="own time, ms (whole run)")
    return layout(
        fig,
        "Own time per region, per rank",
        f"the {len(names)} regions with the most own time over all ranks; choose a rank above",
        height=200 + 28 * len(names) * min(n, 4),
    )
