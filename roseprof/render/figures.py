"""Plotly figures of a run, built from its stored data alone (summary.json, the telemetry), and what every
dashboard figure is built with: `figure()`, `layout()`, `esc()`. The figures step by step and token by token
(steps.json, itl.json) are step_figures.py's.

Every string that came from a trace (range, kernel, command) is HTML-escaped before plotly sees it: plotly
renders a subset of HTML in labels, so `<b>` in a range name would otherwise be markup.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

from roseprof.render.kernel_labels import kernel_labels, kernel_name
from roseprof.render.page import template_mark
from roseprof.render.text import gpus_note, whole_run_note
from roseprof.render.units import region_name


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
