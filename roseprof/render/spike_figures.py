"""The ITL spike figure: every spike token coloured by its main cause (summary.json `spikes`, itl.json)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from roseprof.render.figures import esc, figure, layout
from roseprof.render.step_figures import MAX_ITL_POINTS, ROLLOVER, kept_tokens

# One colour per spike cause (summary.json `spikes`; roseprof/analysis/spikes.py defines them).
CAUSE_COLOURS = {
    "rollover": ROLLOVER,
    "cow": "#9467bd",
    "prefill": "#1f77b4",
    "readmission": "#17becf",
    "preemption": "#8c564b",
    "kv_wait": "#e377c2",
    "batch_change": "#ff7f0e",
    "gc": "#2ca02c",
    "host": "#bcbd22",
    "slow_step": "#7f7f7f",
    "unknown": "#000000",
}


def itl_spikes(itl_series: list[dict] | None, spikes: dict | None) -> go.Figure | None:
    """ITL over time, every spike token coloured by its main cause, the spike threshold as a line."""
    if not itl_series or not spikes or not any("spike_cause" in r for r in itl_series):
        return None
    t = np.concatenate([np.asarray(r["t_ms"], dtype=np.float64) for r in itl_series])
    v = np.concatenate([np.asarray(r["itl_ms"], dtype=np.float64) for r in itl_series])
    cause = np.concatenate(
        [np.asarray(r.get("spike_cause") or [None] * len(r["t_ms"]), dtype=object) for r in itl_series]
    )
    calm = np.flatnonzero((cause == None) & kept_tokens(itl_series))  # noqa: E711 - elementwise on an object array
    stride = max(1, int(np.ceil(len(calm) / MAX_ITL_POINTS)))
    fig = figure()
    fig.add_scattergl(
        x=t[calm[::stride]],
        y=v[calm[::stride]],
        mode="markers",
        name="no spike",
        marker={"color": "#c7c7c7", "size": 3},
    )
    labels = {c["cause"]: c["label"] for c in spikes.get("causes", [])}
    for name, colour in CAUSE_COLOURS.items():
        sel = cause == name
        if sel.any():
            fig.add_scattergl(
                x=t[sel],
                y=v[sel],
                mode="markers",
                name=esc(f"{labels.get(name, name)} ({int(sel.sum())})"),
                marker={"color": colour, "size": 6},
            )
    fig.add_hline(y=spikes["threshold_ms"], line={"dash": "dot", "color": "#555"})
    fig.update_layout(xaxis_title="time since first arrival (ms)", yaxis_title="ITL (ms)")
    note = f"{spikes['spike_tokens']:,} of {spikes['tokens']:,} tokens are spikes: {spikes['definition']}"
    if stride > 1:
        note += f"; every {stride}th other token plotted"
    return layout(fig, "ITL spikes by cause (the main cause of each spike token)", note, height=420)
