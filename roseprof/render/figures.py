"""Plotly figures of a run, built from its stored data alone (summary.json, steps.json, itl.json).

Every string that came from a trace (range, kernel, command) is HTML-escaped before plotly sees it: plotly
renders a subset of HTML in labels, so `<b>` in a range name would otherwise be markup. Large runs are reduced
before plotting, and each figure says how: steps are binned to at most MAX_STEP_BARS bars (mean per bin,
with a bin marked rollover when any of its steps was), ITL points are capped at MAX_ITL_POINTS (every k-th
token of each request, all rollover tokens kept).
"""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from roseprof.render.kernel_labels import kernel_labels, kernel_name
from roseprof.render.page import template_mark
from roseprof.render.text import gpus_note, rollover_sentence, whole_run_note
from roseprof.render.units import region_name
from roseprof.workload.roseinfer import STEP_BREAKDOWN

MAX_STEP_BARS = 1500
MAX_ITL_POINTS = 20000
MAX_ITL_REQUESTS = 64
BREAKDOWN = STEP_BREAKDOWN
ROLLOVER = "#d62728"


def esc(text) -> str:
    return html.escape(str(text), quote=True)


def figure(*traces) -> go.Figure:
    """A new figure of `traces` (none or several, each a trace) that names the page's template mark from the start:
    a plain go.Figure() deep-copies plotly's default template into itself before `layout` replaces it with the mark
    (docs/BENCHMARKS.md, session 31, issue 43)."""
    return go.Figure(list(traces), layout={"template": template_mark()})


def layout(fig: go.Figure, title: str, note: str | None = None, height: int = 380) -> go.Figure:
    full = esc(title) if note is None else f"{esc(title)}<br><sup>{esc(note)}</sup>"
    fig.update_layout(
        title={"text": full, "x": 0.01},
        height=height,
        margin={"l": 60, "r": 20, "t": 70, "b": 50},
        template=template_mark(),  # page.page writes plotly_white in its place
        legend={"orientation": "h", "y": -0.18},
    )
    return fig


def region_bars(summary: dict, top: int = 20) -> go.Figure | None:
    regions = summary.get("regions") or []
    if not regions:
        return None
    rows = sorted(regions, key=lambda r: r["total_ns"], reverse=True)[:top][::-1]
    names = [esc(region_name(r)) for r in rows]
    fig = figure()
    fig.add_bar(y=names, x=[r["total_ns"] / 1e6 for r in rows], orientation="h", name="CPU total")
    fig.add_bar(y=names, x=[r["self_ns"] / 1e6 for r in rows], orientation="h", name="CPU self")
    graphs = any(r.get("gpu_ns") is not None and r.get("gpu_ns") != r.get("gpu_kernel_ns") for r in regions)
    if any(r.get("gpu_proj_ns") is not None for r in rows):
        fig.add_bar(
            y=names, x=[(r["gpu_proj_ns"] or 0) / 1e6 for r in rows], orientation="h", name="GPU projection"
        )
        # Graph replays counted where captured (gpu_ns); older runs have the launch rule's figure only.
        key = "gpu_ns" if graphs else "gpu_kernel_ns"
        fig.add_bar(
            y=names,
            x=[(r.get(key) or 0) / 1e6 for r in rows],
            orientation="h",
            name="GPU kernel time" + (" (CUDA-graph replays where captured)" if graphs else ""),
        )
    fig.update_layout(barmode="group", xaxis_title="ms (sum over instances, whole run)")
    notes = [f"top {len(rows)} of {len(regions)} regions by CPU total"] if len(regions) > top else []
    if graphs:
        notes.append(
            "GPU projection: nsys' launch rule (a graph replay counts under the range that launched it)"
        )
    if whole_run_note(summary.get("steady")):
        notes.append(f"whole run{whole_run_note(summary.get('steady'))}; the steady state is above")
    return layout(fig, "Time per region", "; ".join(notes) or None, height=max(320, 60 + 34 * len(rows)))


def steady_bars(summary: dict, top: int = 16) -> go.Figure | None:
    """Per step in steady state: mean host and GPU time per region (summary.json `steady`)."""
    steady = summary.get("steady")
    if not steady or not steady.get("regions"):
        return None
    rows = steady["regions"][:top][::-1]
    names = [esc(r["name"]) for r in rows]
    fig = figure()
    fig.add_bar(y=names, x=[(r["host_mean_ns"] or 0) / 1e3 for r in rows], orientation="h", name="host")
    if any(r.get("gpu_mean_ns") is not None for r in rows):
        fig.add_bar(y=names, x=[(r["gpu_mean_ns"] or 0) / 1e3 for r in rows], orientation="h", name="GPU")
    fig.update_layout(barmode="group", xaxis_title=f"µs per {esc(steady['unit'])} (mean)")
    note = f"{steady['counted']:,} of {steady['steps']:,} steps"
    if steady.get("graph_replays"):
        note += "; GPU: CUDA-graph replays in the region each kernel was captured in"
    whose = gpus_note(steady)
    if whose:
        note += "; " + whose  # layout() escapes the note
    title = f"Steady state: time per {steady['unit']} by region"
    return layout(fig, title, note, height=max(320, 60 + 34 * len(rows)))


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


def top_kernels(summary: dict, top: int = 15) -> go.Figure | None:
    kernels = summary.get("kernels") or []
    if not kernels:
        return None
    per_name: dict[str, float] = {}
    for k in kernels:
        per_name[k["name"]] = per_name.get(k["name"], 0) + k["total_ns"]
    names = sorted(per_name, key=per_name.get, reverse=True)[:top][::-1]
    # Distinct kernels stay distinct: one base name shared by several instantiations gets a tag each.
    labels = [kernel_name(label, 90) for label in kernel_labels(names, per_name)]
    fig = figure()
    fig.add_bar(
        y=[esc(n) for n in labels],
        x=[per_name[n] / 1e6 for n in names],
        orientation="h",
        hovertext=[esc(n) for n in names],
        hoverinfo="text+x",
    )
    fig.update_layout(xaxis_title="kernel time (ms)")
    return layout(
        fig,
        "Top kernels",
        f"{len(per_name)} distinct kernels; long names shortened in the middle (#tag: one of several with that "
        "base name; the full name on hover)",
        height=max(320, 60 + 28 * len(names)),
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


def telemetry(data: dict | None) -> go.Figure | None:
    """GPU telemetry lanes (clocks, utilisation, memory, power) over the capture, one line per GPU."""
    samples = (data or {}).get("samples") or []
    if not samples:
        return None
    from plotly.subplots import make_subplots

    t0 = min(s["t_ns"] for s in samples)
    lanes = (
        ("sm_clock_mhz", "SM clock (MHz)"),
        ("util_pct", "utilisation (%)"),
        ("mem_used_mib", "memory used (MiB)"),
        ("power_w", "power (W)"),
    )
    fig = make_subplots(
        figure=figure(),
        rows=len(lanes),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.04,
        subplot_titles=[label for _, label in lanes],
    )
    for gpu in sorted({s["gpu"] for s in samples}):
        mine = [s for s in samples if s["gpu"] == gpu]
        t = [(s["t_ns"] - t0) / 1e9 for s in mine]
        for row, (key, _) in enumerate(lanes, start=1):
            fig.add_scatter(
                x=t,
                y=[s[key] for s in mine],
                mode="lines",
                name=f"GPU {gpu}",
                showlegend=row == 1,
                row=row,
                col=1,
            )
    fig.update_xaxes(title_text="seconds since the capture started", row=len(lanes), col=1)
    return layout(
        fig, "GPU telemetry", f"NVML, every {data.get('interval_s', 0.1) * 1000:.0f} ms", height=620
    )
