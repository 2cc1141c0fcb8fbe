"""Figures of a run of several ranks, from summary.json's `collectives` part (analysis/sections/collectives.py).

The arrival-spread heatmap: one row per rank, one column per decode step, each cell the rank's lateness summed
over the step's collectives (its arrival after the first rank's, ms). A straggler is a bright row; one rank's
bad step a bright cell. Long runs are binned to at most MAX_STEP_BARS columns (mean per bin), as the step figures.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from roseprof.render.figures import MAX_STEP_BARS, layout


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
    fig = go.Figure(
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
            f", extra time in {s['region']}" if s.get("region") else ""
        )
    elif s:
        note += "; no clear straggler (the ranks take turns arriving last)"
    return layout(fig, "Arrival spread per rank and decode step", note, height=160 + 40 * len(h["ranks"]))
