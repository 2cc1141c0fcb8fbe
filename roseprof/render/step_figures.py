"""A run's figures step by step and token by token, from its steps.json and itl.json: each decode step's breakdown
and its graph replays' GPU time, the step time and ITL distributions, ITL over time, the GPU's idle time a step.

Large runs are reduced before plotting, and each figure says how: steps are binned to at most MAX_STEP_BARS bars
(mean per bin, with a bin marked rollover when any of its steps was), ITL points are capped at MAX_ITL_POINTS
(every k-th token of each request, all rollover tokens kept).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from roseprof.render.figures import esc, figure, layout
from roseprof.render.text import rollover_sentence
from roseprof.workload.roseinfer import STEP_BREAKDOWN

MAX_STEP_BARS = 1500
MAX_ITL_POINTS = 20000
MAX_ITL_REQUESTS = 64
BREAKDOWN = STEP_BREAKDOWN
ROLLOVER = "#d62728"


def _run_boundaries(fig: go.Figure, starts: list[dict] | None, key: str, shift: int = 0) -> str | None:
    """Dotted lines where each benchmark run begins (--warmup-runs/--repeat-runs capture several runs back to
    back); `key` is "step" or "t_ms", the x of the figure. Returns a note for the subtitle, or None."""
    marks = [s for s in starts or [] if s.get(key) is not None]
    if len(marks) < 2:
        return None
    for s in marks:
        fig.add_vline(
            x=s[key] + shift,
            line={"dash": "dot", "color": "#555", "width": 1},
            annotation_text=f"run {s['run'] + 1}",
            annotation_position="top right",
            annotation_font_size=10,
        )
    return f"{len(marks)} benchmark runs (warm-up included), each start marked"


def first_step(rows: dict) -> int:
    """The engine's number of the table's first step: a flight recorder's steps (its `step` column) start mid-run,
    and the spikes and `roseprof request` name them by it (0 for every other run)."""
    steps = rows.get("step")
    return int(steps[0]) if steps else 0


def _bins(n: int) -> np.ndarray:
    """Bin edges over n steps, at most MAX_STEP_BARS bins."""
    return np.linspace(0, n, min(n, MAX_STEP_BARS) + 1).astype(np.int64)


def _binned(values, edges: np.ndarray, how=np.mean) -> np.ndarray:
    """[bins] how(values[a:b]) of each bin [a, b) (0 where empty): the bins of one size at a time, as the rows of a
    [bins, size] array (linspace's edges make two sizes). The same floats as one call a bin (numpy reduces each
    contiguous row as it reduces a slice), which was 1,500 calls a figure: 0.13 s of the 1M-kernel run's page."""
    v = np.asarray(values, dtype=np.float64)
    out = np.zeros(len(edges) - 1)
    sizes = np.diff(edges)
    for size in np.unique(sizes[sizes > 0]).tolist():
        which = np.flatnonzero(sizes == size)
        out[which] = how(v[edges[which][:, None] + np.arange(size)], axis=1)  # [bins of this size, size]
    return out


def step_breakdown(steps: dict | None) -> go.Figure | None:
    if not steps or not steps.get("rows") or "region:roseinfer.model.forward" not in steps["rows"]:
        return None
    rows = steps["rows"]
    n = len(rows["dur_ns"])
    edges = _bins(n)
    x = edges[:-1] + first_step(rows)
    series = {}
    for label, region in BREAKDOWN:
        series[label] = np.asarray(rows.get(f"region:{region}", [0] * n), dtype=np.float64)
    # forward contains the per-layer kv.append ranges: show forward's own part so the stack adds up.
    series["forward"] = series["forward"] - series["kv.append"]
    series["rest"] = np.asarray(rows.get("rest_ns", [0] * n), dtype=np.float64)
    fig = figure()
    for label, values in series.items():
        fig.add_bar(x=x, y=_binned(values, edges) / 1e3, name=label)
    roll = _binned(np.asarray(rows["rollovers"]) > 0, edges, np.max) > 0
    total = _binned(rows["dur_ns"], edges) / 1e3
    fig.add_scatter(
        x=x[roll],
        y=total[roll] * 1.04,
        mode="markers",
        name="rollover step",
        marker={"symbol": "triangle-down", "color": ROLLOVER, "size": 8},
    )
    fig.update_layout(barmode="stack", bargap=0, xaxis_title="decode step", yaxis_title="µs")
    note = f"{n} steps" + (
        ""
        if n <= MAX_STEP_BARS
        else f", binned to {len(x)} bars (mean per bin; marked if any step in the bin rolled over)"
    )
    runs = _run_boundaries(fig, steps.get("run_starts"), "step", first_step(rows))
    return layout(fig, "Decode step breakdown", f"{note}; {runs}" if runs else note, height=420)


def graph_breakdown(steps: dict | None) -> go.Figure | None:
    """GPU time of each step's graph replay (each kernel's own time on its stream), split by the region open when
    each kernel was captured."""
    rows = (steps or {}).get("rows") or {}
    cols = [k for k in rows if k.startswith("graph:")]
    if not cols:
        return None
    n = len(rows["dur_ns"])
    edges = _bins(n)
    x = edges[:-1] + first_step(rows)
    fig = figure()
    for col in cols:
        fig.add_bar(x=x, y=_binned(rows[col], edges) / 1e3, name=esc(col[len("graph:") :]))
    total = sum(np.asarray(rows[c], dtype=np.float64) for c in cols)
    roll = _binned(np.asarray(rows["rollovers"]) > 0, edges, np.max) > 0
    fig.add_scatter(
        x=x[roll],
        y=_binned(total, edges)[roll] / 1e3 * 1.04,
        mode="markers",
        name="rollover step",
        marker={"symbol": "triangle-down", "color": ROLLOVER, "size": 8},
    )
    fig.update_layout(barmode="stack", bargap=0, xaxis_title="decode step", yaxis_title="GPU µs")
    note = (
        "kernels replayed by CUDA graphs, by the region open when each was captured; each kernel's own time on its "
        "stream (a kernel started early by PDL is not charged for waiting on the one before)"
    ) + ("" if n <= MAX_STEP_BARS else f"; binned to {len(x)} bars (mean per bin)")
    return layout(fig, "GPU time per step by region (CUDA graph replays)", note, height=420)


def step_distribution(summary: dict, steps: dict | None) -> go.Figure | None:
    if not steps or not steps.get("rows"):
        return None
    rows = steps["rows"]
    dur = np.asarray(rows["dur_ns"], dtype=np.float64) / 1e3
    if not is_decode(summary):  # a program's steps: no rollovers to split by
        fig = figure()
        fig.add_histogram(x=dur, name=f"steps ({len(dur)})", histnorm="probability")
        fig.update_layout(xaxis_title="step time (µs)", yaxis_title="fraction of steps")
        return layout(
            fig, "Step time", f"{len(dur):,} steps ({summary['steps'].get('name')})"
        )  # escaped there
    roll = np.asarray(rows["rollovers"]) > 0
    fig = figure()
    fig.add_histogram(
        x=dur[~roll], name=f"normal steps ({int((~roll).sum())})", opacity=0.7, histnorm="probability"
    )
    if roll.any():
        fig.add_histogram(
            x=dur[roll],
            name=f"rollover steps ({int(roll.sum())})",
            opacity=0.7,
            histnorm="probability",
            marker_color=ROLLOVER,
        )
    fig.update_layout(barmode="overlay", xaxis_title="step time (µs)", yaxis_title="fraction of steps")
    note = rollover_sentence(summary.get("steps"))
    return layout(fig, "Step time: rollover vs normal", note)


def itl_over_time(itl_series: list[dict] | None, run_starts: list[dict] | None = None) -> go.Figure | None:
    if not itl_series:
        return None
    total = sum(len(r["itl_ms"]) for r in itl_series)
    stride = max(1, int(np.ceil(total / MAX_ITL_POINTS)))
    shown = itl_series[:MAX_ITL_REQUESTS]
    fig = figure()
    rx, ry = [], []
    for r in shown:
        t, v, roll = np.asarray(r["t_ms"]), np.asarray(r["itl_ms"]), np.asarray(r["rollover"], dtype=bool)
        keep = np.zeros(len(t), dtype=bool)
        keep[::stride] = True
        counted = kept_tokens(
            [r]
        )  # a token left out of the ITL figures would set the axis (a 4 s profiler flush)
        keep &= counted
        roll &= counted
        fig.add_scattergl(
            x=t[keep],
            y=v[keep],
            mode="lines",
            name=esc(f"request {r['id']}"),
            line={"width": 1},
            opacity=0.6,
            showlegend=False,
        )
        rx += t[roll].tolist()
        ry += v[roll].tolist()
    fig.add_scattergl(
        x=rx, y=ry, mode="markers", name="token from a rollover step", marker={"color": ROLLOVER, "size": 5}
    )
    fig.update_layout(xaxis_title="time since first arrival (ms)", yaxis_title="ITL (ms)")
    parts = [
        f"{len(shown)} of {len(itl_series)} requests"
        if len(itl_series) > len(shown)
        else f"{len(shown)} requests"
    ]
    if stride > 1:
        parts.append(f"every {stride}th token plotted, all rollover tokens marked")
    runs = _run_boundaries(fig, run_starts, "t_ms")
    if runs:
        parts.append(runs)
    return layout(fig, "Inter-token latency over time", "; ".join(parts), height=420)


def itl_distribution(itl_series: list[dict] | None) -> go.Figure | None:
    if not itl_series:
        return None
    v = np.concatenate([np.asarray(r["itl_ms"], dtype=np.float64) for r in itl_series] or [np.zeros(0)])
    roll = np.concatenate(
        [np.asarray(r["rollover"], dtype=bool) for r in itl_series] or [np.zeros(0, dtype=bool)]
    )
    kept = kept_tokens(itl_series)
    v, roll = v[kept], roll[kept]
    if len(v) == 0:
        return None
    fig = figure()
    fig.add_box(x=v[~roll], name="elsewhere", boxpoints=False)
    if roll.any():
        fig.add_box(x=v[roll], name="at rollover", boxpoints=False, marker_color=ROLLOVER)
    fig.update_layout(xaxis_title="ITL (ms)", showlegend=False)
    note = f"{int(roll.sum())} rollover tokens, {int((~roll).sum())} others"
    if not kept.all():
        note += (
            f"; {int((~kept).sum())} left out (the profiler's own work or CUDA-graph capture in their gap)"
        )
    return layout(fig, "ITL at rollover steps vs elsewhere", note, height=300)


def kept_tokens(itl_series: list[dict]) -> np.ndarray:
    """[T] the tokens the ITL figures count: not those whose gap holds the profiler's work or a capture."""
    return np.concatenate(
        [
            np.array([w is None for w in r.get("left_out") or [None] * len(r["itl_ms"])], bool)
            for r in itl_series
        ]
        or [np.zeros(0, dtype=bool)]
    )


def is_decode(summary: dict) -> bool:
    """The engine's decode steps (rollovers apply), not a program's ProfilerStep or --step-range steps."""
    return ((summary or {}).get("steps") or {}).get("kind", "decode") == "decode"


def gpu_idle(steps: dict | None, summary: dict | None = None) -> go.Figure | None:
    if not steps or "gpu_idle_ns" not in (steps.get("rows") or {}):
        return None
    unit = "decode step" if is_decode(summary) else "step"
    rows = steps["rows"]
    edges = _bins(len(rows["gpu_idle_ns"]))
    fig = figure()
    fig.add_scatter(x=edges[:-1], y=_binned(rows["gpu_idle_ns"], edges) / 1e3, mode="lines", name="GPU idle")
    fig.update_layout(xaxis_title=unit, yaxis_title="GPU idle within the step (µs)")
    return layout(fig, f"GPU idle time per {unit}", "step window minus the union of GPU activity", height=300)
