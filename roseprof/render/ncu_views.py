"""The Nsight Compute part of a run dashboard, from summary.json's `ncu` section alone: cards, a kernel table with
the key metrics, speed-of-light bars (compute vs memory, % of peak), a roofline (the GPU's DRAM slope and FLOP
ceilings, one point per launch, its metrics on hover) and ncu's rule findings. Every string from the report is
escaped (html.escape in tables, figures.esc in plotly labels)."""

from __future__ import annotations

import html

import plotly.graph_objects as go

from roseprof.render.figures import esc, figure, layout
from roseprof.render.kernel_labels import kernel_labels, kernel_name
from roseprof.render.page import table

MAX_SOL_KERNELS = 25
MAX_RULES = 60
CEILINGS = (  # (peak key, label, dash)
    ("peak_tensor_flop_per_s", "FP16 tensor", "dot"),
    ("peak_fp16_flop_per_s", "FP16", "dash"),
    ("peak_fp32_flop_per_s", "FP32", "solid"),
    ("peak_fp64_flop_per_s", "FP64", "dashdot"),
)


def _f(x, fmt: str = "{:,.1f}", scale: float = 1.0) -> str:
    return "-" if x is None else fmt.format(x / scale)


def _labels(names: list[str], width: int) -> dict[str, str]:
    """Each kernel's label in a figure: its name where it fits, else its base name, with a tag where several share
    that (a CUTLASS GEMM's names agree for hundreds of characters: cut at `width`, they would be one bar)."""
    return dict(zip(names, (kernel_name(label, width) for label in kernel_labels(names))))


def cards(ncu: dict) -> list[tuple[str, str]]:
    out = [("profiled", f"{len(ncu['launches']):,} launches of {len(ncu['kernels']):,} kernels")]
    for dev in ncu["devices"][:2]:
        label = dev.get("name") or f"device {dev.get('id')}"
        bw, fp32 = dev.get("peak_dram_bytes_per_s"), dev.get("peak_fp32_flop_per_s")
        if bw is None and fp32 is None:
            continue
        out.append(
            (
                f"{label} peaks",
                f"DRAM {_f(bw, '{:,.2f}', 1e12)} TB/s · FP32 {_f(fp32, '{:,.1f}', 1e12)} TFLOP/s",
            )
        )
    return out


def sol_bars(ncu: dict) -> go.Figure | None:
    """Speed of light per kernel: compute (SM) and memory throughput, % of the GPU's peak (mean over launches)."""
    rows = [
        k
        for k in ncu["kernels"]
        if k["mean_sm_throughput_pct"] is not None or k["mean_memory_throughput_pct"]
    ]
    if not rows:
        return None
    rows = rows[:MAX_SOL_KERNELS][::-1]
    label = _labels([k["name"] for k in ncu["kernels"]], 80)
    names = [esc(label[k["name"]]) for k in rows]
    hover = [esc(k["name"]) for k in rows]
    fig = figure()
    for key, label, colour in (
        ("mean_sm_throughput_pct", "compute (SM)", "#636efa"),
        ("mean_memory_throughput_pct", "memory", "#ef553b"),
    ):
        fig.add_bar(
            y=names,
            x=[k[key] if k[key] is not None else 0 for k in rows],
            orientation="h",
            name=label,
            marker_color=colour,
            hovertext=hover,
            hoverinfo="text+x",
        )
    fig.update_layout(barmode="group", xaxis={"title": "% of peak (ncu speed of light)", "range": [0, 100]})
    note = f"mean over each kernel's profiled launches; top {len(rows)} kernels by profiled time"
    return layout(fig, "Speed of light: compute vs memory", note, height=max(320, 80 + 46 * len(rows)))


def _hover(r: dict, dev: dict) -> str:
    parts = [
        f"<b>{esc(kernel_name(r['kernel'], 100))}</b>",
        f"launch {r['id']} · region {esc(r['region'] or '-')}",
        f"duration {_f(r['duration_ns'], '{:,.2f}', 1e3)} µs",
        f"DRAM {_f(r['dram_bytes_per_s'], '{:,.1f}', 1e9)} GB/s ({_f(r['dram_bandwidth_pct_of_peak'])}% of peak)",
        f"FLOP/s {_f(r['flop_per_s'], '{:,.3g}')} · intensity {_f(r['arithmetic_intensity'], '{:,.3g}')} FLOP/B",
        f"SM {_f(r['sm_throughput_pct'])}% · memory {_f(r['memory_throughput_pct'])}% · "
        f"occupancy {_f(r['achieved_occupancy_pct'])}%",
        f"grid {esc(r['grid'])} block {esc(r['block'])}",
    ]
    return "<br>".join(parts)


def roofline(ncu: dict) -> go.Figure | None:
    """The first device's roofline: DRAM bandwidth slope under each FLOP ceiling, one point per launch."""
    if not ncu["devices"]:
        return None
    dev = ncu["devices"][0]
    bw = dev.get("peak_dram_bytes_per_s")
    points = [
        r
        for r in ncu["launches"]
        if r["device"] == dev.get("id")
        and (r["arithmetic_intensity"] or 0) > 0
        and (r["flop_per_s"] or 0) > 0
    ]
    ceilings = [(dev[k], label, dash) for k, label, dash in CEILINGS if dev.get(k)]
    if not bw or not ceilings or not points:
        return None
    xs = [r["arithmetic_intensity"] for r in points]
    lo = min(min(xs), min(p for p, _, _ in ceilings) / bw) / 10
    hi = max(max(xs), max(p for p, _, _ in ceilings) / bw) * 10
    fig = figure()
    for peak, label, dash in ceilings:
        ridge = peak / bw
        fig.add_scatter(
            x=[lo, ridge, hi],
            y=[bw * lo, peak, peak],
            mode="lines",
            name=f"{label} roof ({peak / 1e12:,.1f} TFLOP/s)",
            line={"dash": dash, "color": "#444"},
            hoverinfo="name",
        )
    by_kernel: dict[str, list[dict]] = {}
    for r in points:
        by_kernel.setdefault(r["kernel"], []).append(r)
    label = _labels(list(by_kernel), 50)
    for name, rows in sorted(by_kernel.items(), key=lambda kv: -sum(r["duration_ns"] for r in kv[1]))[:20]:
        fig.add_scatter(
            x=[r["arithmetic_intensity"] for r in rows],
            y=[r["flop_per_s"] for r in rows],
            mode="markers",
            name=esc(label[name]),
            marker={"size": 10},
            hovertext=[_hover(r, dev) for r in rows],
            hoverinfo="text",
        )
    fig.update_layout(
        xaxis={"type": "log", "title": "arithmetic intensity (FLOP per DRAM byte)"},
        yaxis={"type": "log", "title": "achieved FLOP/s"},
    )
    skipped = len([r for r in ncu["launches"] if r["device"] == dev.get("id")]) - len(points)
    source = ", ".join(sorted(set((dev.get("peak_sources") or {}).values()))) or "?"
    note = f"{dev.get('name') or 'device ' + str(dev.get('id'))}: DRAM {bw / 1e12:,.2f} TB/s; peaks from {source}"
    if skipped:
        note += f"; {skipped} launches without floating-point work or DRAM traffic not drawn"
    return layout(fig, "Roofline (DRAM)", note, height=520)


def figures(summary: dict) -> list:
    ncu = summary.get("ncu")
    if not ncu:
        return []
    return [f for f in (sol_bars(ncu), roofline(ncu)) if f is not None]


def kernel_table(ncu: dict) -> str:
    head = [
        "region",
        "kernel",
        "launches",
        "mean µs",
        "SM %",
        "memory %",
        "DRAM %",
        "occupancy %",
        "DRAM read MB",
        "DRAM write MB",
        "GFLOP/s",
        "FLOP/B",
        "% of peak BW",
    ]
    rows = []
    for k in ncu["kernels"]:
        rows.append(
            [
                html.escape(", ".join(k["regions"]) or "-"),
                html.escape(k["name"]),
                f"{k['launches']:,}",
                _f(k["mean_duration_ns"], "{:,.2f}", 1e3),
                _f(k["mean_sm_throughput_pct"]),
                _f(k["mean_memory_throughput_pct"]),
                _f(k["mean_dram_throughput_pct"]),
                _f(k["mean_achieved_occupancy_pct"]),
                _f(k["mean_dram_read_bytes"], "{:,.3f}", 1e6),
                _f(k["mean_dram_write_bytes"], "{:,.3f}", 1e6),
                _f(k["mean_flop_per_s"], "{:,.1f}", 1e9),
                _f(k["mean_arithmetic_intensity"], "{:,.3g}"),
                _f(k["mean_dram_bandwidth_pct_of_peak"]),
            ]
        )
    return (
        f'<div class="panel"><h2>Kernels (Nsight Compute, mean per launch)</h2>'
        f"<p>{html.escape(ncu['note'])}</p>{table(head, rows, 'kernels')}</div>"
    )


def rule_table(ncu: dict) -> str:
    rules = ncu["rules"]
    if not rules:
        return ""
    label = _labels([k["name"] for k in ncu["kernels"]], 60)
    shown = lambda name: html.escape(label.get(name) or kernel_name(name, 60))  # noqa: E731
    rows = [
        [
            f'<span title="{html.escape(r["kernel"])}">{shown(r["kernel"])}</span>',
            html.escape(f"{r['rule']} ({r['type']})"),
            _f(r["speedup_pct"]) + (f" ({html.escape(r['speedup_type'])})" if r.get("speedup_type") else ""),
            f"{r['launches']:,}",
            html.escape(r["description"]),
        ]
        for r in rules[:MAX_RULES]
    ]
    more = f" (top {MAX_RULES} of {len(rules)})" if len(rules) > MAX_RULES else ""
    head = ["kernel", "finding", "est. speedup %", "launches", "what ncu says"]
    return f'<div class="panel"><h2>ncu rule findings{more}</h2>{table(head, rows, "rules")}</div>'


def panels(summary: dict) -> str:
    ncu = summary.get("ncu")
    return kernel_table(ncu) + rule_table(ncu) if ncu else ""
