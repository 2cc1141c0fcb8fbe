"""The diff dashboard: the verdict first (is after faster or slower than before?), then the two runs side by side
(regions, step and ITL distributions, kernel deltas, every metric); the method is the footnote."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

from roseprof.render import kernel_labels, load_figures, text, verdict_text
from roseprof.render.figures import esc, figure, layout
from roseprof.render.page import figure_divs, page, table, write_page
from roseprof.render.view import DiffView

COLORS = {"before": "#636efa", "after": "#ef553b"}
WORD_COLOR = {"faster": "#2ca02c", "slower": "#d62728", "mixed": "#b8860b"}


def _per_step_only(rows: list[dict]) -> list[dict]:
    """The rows per decode step where there are any (a region or kernel outside the steps is compared per run:
    not a bar on the same axis)."""
    return [m for m in rows if m.get("per_step")] if any(m.get("per_step") for m in rows) else rows


def _region_bars(result: dict) -> go.Figure | None:
    """Each region's time per step by the statistic the verdict judged it by (verdict.judged_regions: its own CPU
    time's p5, its own time's p5, or its total), so that the chart says what the verdict says; a region the
    verdict names carries its word."""
    v = result["verdict"]
    by_name = {m["name"]: m for m in result["metrics"]}
    judged = v.get("judged_regions") or {}
    if judged:
        rows = [(short, by_name[name]) for short, name in judged.items() if name in by_name]
        stats = dict.fromkeys(text.metric_label(m["name"], True).rpartition(" · ")[2] for _, m in rows)
        what = " / ".join(stats)
    else:  # no region per step: their totals per run
        rows = [
            (m["name"][len("regions.") : -len(".total_ns")], m)
            for m in _per_step_only(
                [
                    m
                    for m in result["metrics"]
                    if m["name"].startswith("regions.") and m["name"].endswith(".total_ns")
                ]
            )
        ]
        what = "time/run"
    if not rows:
        return None
    words = {
        r["label"]: r["word"] + (", machine" if r.get("machine") else "")
        for r in v["decision"]["rows"]
        if r["kind"] == "region"
    }
    rows = sorted(rows, key=lambda sm: (sm[0] in words, max(sm[1]["a"], sm[1]["b"])), reverse=True)[:20][::-1]
    names = [esc(short + (f" ({words[short]})" if short in words else "")) for short, _ in rows]
    fig = figure()
    for key, label in (("a", "before"), ("b", "after")):
        fig.add_bar(
            y=names,
            x=[m[key] / 1e3 for _, m in rows],
            orientation="h",
            name=label,
            marker_color=COLORS[label],
        )
    fig.update_layout(barmode="group", xaxis_title=f"µs ({esc(what)})")
    return layout(
        fig,
        "Time per region, before vs after (as the verdict judges it)",
        None,
        height=max(320, 60 + 40 * len(rows)),
    )


def _overlaid(title: str, xa, xb, xlabel: str) -> go.Figure | None:
    if xa is None or xb is None or not len(xa) or not len(xb):
        return None
    both = np.concatenate([xa, xb])
    lo, hi = float(np.percentile(both, 0.5)), float(np.percentile(both, 99.5))
    bins = {"start": lo, "end": hi, "size": max((hi - lo) / 60, 1e-6)}
    fig = figure()
    for label, x in (("before", xa), ("after", xb)):
        fig.add_histogram(
            x=x,
            name=f"{label} ({len(x)})",
            opacity=0.6,
            histnorm="probability",
            xbins=bins,
            marker_color=COLORS[label],
        )
    fig.update_layout(barmode="overlay", xaxis_title=xlabel, yaxis_title="fraction")
    return layout(fig, title, "central 99% of both runs shown")


def _kernel_deltas(result: dict) -> go.Figure | None:
    rows = [
        m
        for m in result["metrics"]
        if m["name"].startswith("kernels.") and m["name"].endswith(".total_ns") and m["delta_pct"] is not None
    ]
    rows = _per_step_only(rows)
    if not rows:
        return None
    rows = sorted(rows, key=lambda m: abs(m["b"] - m["a"]), reverse=True)[:15][::-1]
    full = [m["name"][len("kernels.") : -len(".total_ns")] for m in rows]
    # Distinct kernels stay distinct bars: a shared base name gets each kernel's tag (kernel_labels.kernel_labels).
    among = result["verdict"].get("kernel_names", ())
    names = [esc(kernel_labels.kernel_name(label, 80)) for label in kernel_labels.kernel_labels(full, among)]
    fig = figure()
    fig.add_bar(
        y=names,
        hovertext=[esc(n) for n in full],
        x=[(m["b"] - m["a"]) / 1e3 for m in rows],
        orientation="h",
        marker_color=["#d62728" if m["b"] > m["a"] else "#2ca02c" for m in rows],
    )
    fig.update_layout(xaxis_title="after − before (µs per decode step)")
    return layout(fig, "Kernel time change", "largest absolute changes", height=max(320, 60 + 28 * len(rows)))


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
    fig = figure()
    fig.add_bar(
        y=names,
        x=[m["delta_pct"] for m in rows],
        orientation="h",
        marker_color=["#d62728" if m["delta_pct"] > 0 else "#2ca02c" for m in rows],
    )
    fig.update_layout(xaxis_title="B vs A, % change of the mean duration per launch")
    return layout(fig, "Kernel duration change (Nsight Compute)", None, height=max(320, 60 + 28 * len(rows)))


def _metrics_table(result: dict) -> str:
    head = ["metric", "key", "before", "after", "change [95% CI]", ""]
    rows = []
    for m in result["metrics"]:
        unit = text.metric_unit(m["name"])
        verdict = (
            "REGRESSION"
            if m.get("regression")
            else ("machine" if m.get("machine") else ("change" if m["significant"] else ""))
        )
        rows.append(
            [
                html.escape(text.metric_label(m["name"], m.get("per_step", False))),
                f"<code>{html.escape(m['name'])}</code>",
                html.escape(text.value(unit, m["a"])),
                html.escape(text.value(unit, m["b"])),
                html.escape(text.change(m["delta_pct"], m["ci_low_pct"], m["ci_high_pct"])),
                verdict,
            ]
        )
    return f'<div class="panel"><h2>All metrics (by evidence, then size: changes; intervals clear of 0; other intervals; figures with none)</h2>{table(head, rows)}</div>'


def _change_table(rows: list[dict], first: str) -> str:
    body = []
    for r in rows:
        color = WORD_COLOR.get(r["word"])
        word = html.escape(r["word"] + (" (machine)" if r.get("machine") else "")) + (
            f" <small>({html.escape(r['why'])})</small>" if r.get("why") else ""
        )
        body.append(
            [
                html.escape(r["label"]),
                html.escape(text.value(r["unit"], r["before"])),
                html.escape(text.value(r["unit"], r["after"])),
                html.escape(text.change(r["delta_pct"], r["ci_low_pct"], r["ci_high_pct"])),
                f'<b style="color:{color}">{word}</b>' if color else word,
            ]
        )
    return table([first, "before", "after", "change [95% CI]", "verdict"], body)


def _verdict_panel(result: dict) -> str:
    """The first thing on the page: the answer, the headline figures, where the time moved, the gate."""
    v = result["verdict"]
    color = WORD_COLOR.get(v["overall"], "#1d2330")
    lines = [
        verdict_text.options_line(v),
        verdict_text.side_line("before", v["before"]),
        verdict_text.side_line("after", v["after"]),
        verdict_text.tools_note(v),
        verdict_text.one_run_note(v),
        verdict_text.machine_line(v),
    ]
    parts = [
        "".join(f"<p>{html.escape(line)}</p>" for line in lines if line),
        f'<h2 style="color:{color};font-size:20px">{html.escape(verdict_text.headline_sentence(v))}</h2>',
        _change_table(v["headline"], "figure"),
        f"<p><small>{html.escape(verdict_text.samples_note(v))}</small></p>",
    ]
    at_rollover = ("rollover_regions", "regions at rollover steps")
    for key, title in (("regions", "regions"), at_rollover, ("kernels", "kernels")):
        if v.get(key):
            per = verdict_text.per_what(v[key])
            what = verdict_text.what_moved_in(v[key])
            parts.append(f"<h2>Where the time moved: {title} ({what} {per}, beyond the noise floor)</h2>")
            parts.append(_change_table(v[key], "kernel" if key == "kernels" else "region"))
    for label, names in (("New kernels", v["new_kernels"]), ("Vanished kernels", v["vanished_kernels"])):
        if names:
            parts.append(f"<p><b>{label}:</b> " + ", ".join(html.escape(n) for n in names) + "</p>")
    if result["threshold_pct"] is not None:
        gate = ", ".join(result["regressions"]) if result["regressions"] else "no regression"
        parts.append(f"<p><b>Gate ({result['threshold_pct']}%):</b> {html.escape(gate)}</p>")
    return f'<div class="panel verdict">{"".join(parts)}</div>'


class DiffDashboard:
    """A diff's offline HTML dashboard, from its view alone."""

    def render(self, view: DiffView, out_path: Path) -> Path:
        """Write the dashboard to out_path (atomically) and return it (view.default_path: the usual place)."""
        return _render(view.result, view.samples, Path(out_path))


def _render(result: dict, samples: dict, out: Path) -> Path:
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
        *load_figures.sweep_diff(result["metrics"]),  # two sweeps: curve against curve
    ]
    figs = [f for f in figs if f is not None]
    main = f"""{_verdict_panel(result)}
{figure_divs(len(figs))}
{_metrics_table(result)}
"""
    footer = f"Method: {html.escape(result['method'])}."
    a, b = result["a"], result["b"]
    sub = f"before: {_side(a)} ({a.get('name')})   after: {_side(b)} ({b.get('name')})"
    return write_page(page("roseprof diff", "roseprof diff", sub, main, figs, footer), out)


def _side(side: dict) -> str:
    """A side of the diff by its latest run's id, and how many runs its group has beyond that one."""
    more = len(side.get("runs") or []) - 1
    return f"{side['id']} + {more} more" if more > 0 else side["id"]
