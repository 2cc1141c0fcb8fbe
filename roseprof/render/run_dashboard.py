"""The run dashboard: summary cards, plotly figures and tables of one stored run, in the shared page shell."""

from __future__ import annotations

import datetime as dt
import html
from pathlib import Path

from roseprof.errors import RoseprofError
from roseprof.render import (
    commands,
    figures,
    kernel_labels,
    live_figures,
    load_figures,
    ncu_views,
    rank_figures,
    spike_figures,
    step_figures,
    text,
    units,
)
from roseprof.render.page import figure_divs, page, table, write_page
from roseprof.render.view import RunRecord, RunView


def _cards(run: RunRecord, summary: dict) -> list[tuple[str, str]]:
    m = run.manifest
    tool = m.get("tool", {})
    env = m.get("environment") or {}
    gpus = m.get("gpus") or summary.get("gpus") or []
    device = ", ".join(g.get("name", "?") for g in gpus) or (env.get("cpu") or {}).get("model", "CPU")
    cards = [
        ("tool", commands.tool_label(tool)),
        ("status", m.get("status", "?")),
        ("device", device),
        ("command", " ".join(m.get("command") or []) or m.get("source", "-")),
    ]
    if summary.get("ncu"):
        # ncu replays each kernel alone, many times over: the profiled program's step and token times measure the
        # profiler, so they are not shown (summary.json keeps them).
        return cards + ncu_views.cards(summary["ncu"])
    steps = summary.get("steps")
    steady = summary.get("steady")
    if steady:
        st = steady["step"]
        value = f"host {text.duration(st['host_p50_ns'])}"
        if st.get("gpu_p50_ns") is not None:
            value += f", GPU {text.duration(st['gpu_p50_ns'])}"
        cards.insert(0, (f"per {steady['unit']}, steady state (p50)", value))
    if steps and steps.get("kind", "decode") == "decode":
        cards.append(("decode steps", f"{steps['count']:,} (rollover {steps['rollover']['count']:,})"))
    elif steps:
        cards.append((f"steps ({steps.get('name')})", f"{steps['count']:,}"))
    if steps:
        cards.append(
            ("step p50 / p99", f"{text.duration(steps['p50_ns'])} / {text.duration(steps['p99_ns'])}")
        )
    req = summary.get("requests")
    if req:
        cards.append(
            ("throughput", f"{req['throughput_tok_s']:,.1f} tok/s ({req['completion_tokens']:,} tokens)")
        )
        for key, label in (("ttft", "TTFT"), ("tpot", "TPOT")):
            s = req[key]
            if s.get("count"):
                cards.append(
                    (f"{label} p50/p95/p99", f"{s['p50_ms']:.2f} / {s['p95_ms']:.2f} / {s['p99_ms']:.2f} ms")
                )
    itl = summary.get("itl")
    if itl and itl.get("count"):
        cards.append(
            ("ITL p50/p95/p99", f"{itl['p50_ms']:.2f} / {itl['p95_ms']:.2f} / {itl['p99_ms']:.2f} ms")
        )
        at = itl["at_rollover"]
        if at.get("count"):
            cards.append(
                (
                    "ITL p99 at rollover / elsewhere",
                    f"{at['p99_ms']:.2f} / {itl['elsewhere']['p99_ms']:.2f} ms",
                )
            )
    attribution = summary.get("kernel_attribution")
    if attribution and attribution.get("attributed_pct") is not None:
        graph = attribution["graph_by_capture_ns"]
        cards.append(
            (
                "kernel time in regions",
                f"{attribution['attributed_pct']:.1f}%"
                + (f" ({units.ms(graph)} ms graph-replayed, by capture region)" if graph else ""),
            )
        )
    return cards


def _region_table(summary: dict) -> str:
    regions = summary.get("regions") or []
    if not regions:
        return ""
    headers = ["region", "count", "total ms", "self ms", "p50 µs", "p99 µs", "GPU proj ms", "GPU kernel ms"]
    # Graph-replayed kernel time counted where captured: a column only when the run has any.
    graph = any(r.get("gpu_ns") is not None and r.get("gpu_ns") != r.get("gpu_kernel_ns") for r in regions)
    if graph:
        headers[6:8] = ["GPU proj ms (launch rule)", "GPU kernel ms (launch rule)"]
        headers.append("GPU kernel ms (graph replays where captured)")
    rows = []
    for r in regions:
        row = units.region_cells(r)
        row[0] = html.escape(row[0])
        if graph:
            row.append(units.ms(r.get("gpu_ns")))
        rows.append(row)
    # A CPU run has no GPU figures: its GPU columns would be all "-".
    keep = [i for i in range(len(headers)) if i == 0 or any(row[i] != "-" for row in rows)]
    kept = table([headers[i] for i in keep], [[row[i] for i in keep] for row in rows])
    note = (
        "<p>Launch rule: a GPU op belongs to the ranges around the call that launched it, as in <code>nsys "
        "stats</code>; a CUDA graph replay is one launch, so all its kernels count there. The last column counts "
        "each replayed kernel in the regions open when its graph node was captured.</p>"
        if graph
        else ""
    )
    title = html.escape("Regions, whole run" + text.whole_run_note(summary.get("steady")))
    return f'<div class="panel"><h2>{title}</h2>{note}{kept}</div>'


def _steady_panel(summary: dict) -> str:
    """The steady state first: per step, host and GPU time per region, and what was left out."""
    steady = summary.get("steady")
    if not steady:
        return ""
    headers, rows = units.steady_table(steady, steady["regions"], f"(whole {steady['unit']})")
    rows = [[html.escape(c) for c in row] for row in rows]
    rows[0][0] = f"<b>{rows[0][0]}</b>"
    notes = [text.GRAPH_NOTE] if steady.get("graph_replays") else []
    notes += [
        note
        for note in (text.overlap_note(steady), text.concurrency_note(steady), text.gpus_note(steady))
        if note
    ]
    if "own CPU p5" in headers:
        notes.append(
            "own CPU (µs): each region's thread CPU time per step less its children's, which no wait for a core is in "
            "(a diff of CPU runs judges regions by its p5)"
        )
    left = text.left_out_sentence(steady)
    if left:
        notes.append(left)
    body = "".join(f"<p>{html.escape(n)}</p>" for n in notes)
    title = text.steady_title(steady)
    return (
        f'<div class="panel" id="steady"><h2>{html.escape(title[0].upper() + title[1:])}</h2>'
        f"{body}{table(headers, rows)}</div>"
    )


def _no_gpu_note(summary: dict) -> str:
    """A CPU run's dashboard says why it has no kernel sections."""
    if summary.get("gpu_ops") is not None or summary.get("ncu"):
        return ""
    return (
        '<div class="panel"><h2>Kernels</h2><p>This trace has no GPU activity (a CPU run, or a capture without '
        "CUDA tracing), so there are no kernel, GPU time or GPU idle sections.</p></div>"
    )


def _kernels_by_region(summary: dict, per_region: int = 5) -> str:
    # By the region a kernel ran for (graph replays: where captured); older runs' kernel rows otherwise.
    kernels = summary.get("kernel_regions") or summary.get("kernels") or []
    if not kernels:
        return ""
    groups: dict[str, list[dict]] = {}
    for k in kernels:
        groups.setdefault(k.get("capture_region") or k["region"] or "(outside any range)", []).append(k)
    labels = kernel_labels.label_of([k["name"] for k in kernels])
    rows = []
    for region, ks in sorted(groups.items(), key=lambda kv: -sum(k["total_ns"] for k in kv[1])):
        for k in sorted(ks, key=lambda k: -k["total_ns"])[:per_region]:
            mean = k["total_ns"] / k["count"] if k["count"] else 0
            rows.append(
                [
                    html.escape(region),
                    f'<span title="{html.escape(k["name"])}">{html.escape(kernel_labels.kernel_name(labels[k["name"]], 120))}</span>',
                    f"{k['count']:,}",
                    units.ms(k["total_ns"]),
                    units.us(mean),
                ]
            )
    head = ["region (innermost; graph kernels: where captured)", "kernel", "count", "total ms", "mean µs"]
    return (
        f'<div class="panel"><h2>Top kernels per region (top {per_region} each)</h2>'
        f"{table(head, rows, 'kernels')}</div>"
    )


def _spike_tables(spikes: dict | None, top_deltas: int = 4) -> str:
    """The cause table, then the largest spikes with their step's region and kernel deltas against the median
    step (positive: the spike's step spent more there)."""
    if not spikes or not (spikes.get("causes") or spikes.get("left_out")):
        return ""
    cause_table = table(
        ["main cause", "spike tokens", "share %", "added p50 ms", "added total ms", "where the time went"],
        [
            [
                html.escape(e["label"]),
                f"{e['tokens']:,}",
                f"{e['share_pct']:.1f}",
                f"{e['added_p50_ms']:.3f}",
                f"{e['added_total_ms']:.1f}",
                html.escape(text.evidence_text(e.get("evidence"))),
            ]
            for e in spikes["causes"]
        ],
    )
    left = text.left_out_line(spikes.get("left_out"))

    def deltas(d: dict | None, unit_ns=1e3) -> str:
        if not d:
            return "-"
        top = sorted(d.items(), key=lambda kv: -abs(kv[1]))[:top_deltas]
        # Kernel names run to hundreds of characters (templates): the start says which one; the tooltip has all.
        return "<br>".join(
            f'<span title="{html.escape(k)}">{html.escape(k if len(k) <= 60 else k[:57] + "...")}</span> '
            f"{v / unit_ns:+,.1f} µs"
            for k, v in top
        )

    listed = []
    for s in spikes.get("listed") or []:
        causes = ", ".join(
            f"{html.escape(k)} {v:.2f} ms" for k, v in sorted(s["causes"].items(), key=lambda kv: -kv[1])
        )
        rec = s.get("step_record") or {}
        listed.append(
            [
                f"{s['t_ms']:.0f}",
                f"{s['itl_ms']:.2f}",
                str(s["step"]) if s["step"] >= 0 else "prefill",
                html.escape(", ".join(f"{k} {v}" for k, v in rec.items() if v is not None)),
                causes,
                deltas(s.get("regions")),
                deltas(s.get("kernels")),
            ]
        )
    lhead = [
        "t ms",
        "ITL ms",
        "step",
        "step record",
        "added by cause",
        "regions vs median step",
        "kernels vs median step",
    ]
    return (
        f'<div class="panel"><h2>ITL spikes</h2><p>{html.escape(spikes["definition"])}: '
        f"{spikes['spike_tokens']:,} of {spikes['tokens']:,} tokens, threshold {spikes['threshold_ms']:.3f} ms "
        f"(median {spikes['median_ms']:.3f} ms). Each spike token has one main cause: what added most to it.</p>"
        f"{f'<p>{html.escape(left)}.</p>' if left else ''}{cause_table}<h2>Largest spikes (one per step)</h2>{table(lhead, listed)}</div>"
    )


def build_figures(view: RunView) -> list:
    summary = view.summary
    if summary.get("ncu"):
        return ncu_views.figures(summary)  # timeline figures of an ncu run would show the profiler's replays
    if summary.get("serving"):  # a load (roseprof load): its requests, not a trace
        start_ns = (summary["serving"].get("clock") or {}).get("start_monotonic_ns")
        live = summary.get("live") and live_figures.waterfall(
            view.step_log, view.load_tokens, summary["live"], start_ns
        )
        return ([live] if live else []) + load_figures.figures(summary["serving"], view.load_tokens)
    if summary.get("loads"):  # several loads in one run: a sweep's curve, a repeat's loads
        return load_figures.several(summary["loads"], view.load_tokens)
    steps, itl = view.steps, view.itl
    out = [
        figures.steady_bars(summary),
        figures.region_bars(summary),
        step_figures.step_breakdown(steps),
        step_figures.graph_breakdown(steps),
        step_figures.itl_over_time(itl, (steps or {}).get("run_starts")),
        spike_figures.itl_spikes(itl, summary.get("spikes")),
        step_figures.itl_distribution(itl),
        step_figures.step_distribution(summary, steps),
        rank_figures.arrival_heatmap(summary),
        rank_figures.step_lanes(steps),
        rank_figures.rank_regions(summary),
        figures.top_kernels(summary),
        step_figures.gpu_idle(steps, summary),
        figures.telemetry(view.telemetry),
    ]
    return [f for f in out if f is not None]


class RunDashboard:
    """A run's offline HTML dashboard, from its view alone."""

    def render(self, view: RunView, out_path: Path) -> Path:
        """Write the dashboard to out_path (atomically) and return it."""
        return _render(view, out_path)


def _render(view: RunView, out_path: Path) -> Path:
    run = view.run
    summary = view.summary
    if summary is None:  # roseprof.api.ensure_dashboard refuses such a run first, in the store's words
        raise RoseprofError(f"run {run.id} has no summary (status {run.manifest.get('status')})")
    extra = "".join(_section_panel(p) for p in view.panels)
    figs = build_figures(view)
    cards = "".join(
        f'<div class="card"><div class="k">{html.escape(k)}</div><div class="v">{html.escape(str(v))}</div></div>'
        for k, v in _cards(run, summary)
    )
    # Why the ranks' timings cannot be compared first (rank_clock.doubts: no straggler is named), then the rest.
    doubts = (summary.get("rank_clock") or {}).get("doubts") or []
    warnings = "".join(f"<li>{html.escape(w)}</li>" for w in [*doubts, *(summary.get("warnings") or [])])
    main = f"""<div class="cards">{cards}</div>
{f'<div class="panel"><h2>Warnings</h2><ul>{warnings}</ul></div>' if warnings else ""}
{_steady_panel(summary)}
{figure_divs(len(figs))}
{_spike_tables(summary.get("spikes"))}
{ncu_views.panels(summary) if summary.get("ncu") else _region_table(summary) + _kernels_by_region(summary)}
{_no_gpu_note(summary)}
{extra}
"""
    footer = f"""Rendered {dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")} by roseprof from the stored run alone.
Percentiles are over all instances; large runs are binned or thinned in the figures as each figure's subtitle says,
never in the tables."""
    script = live_figures.LINK_JS if summary.get("live") else ""  # a click on a request marks its steps
    text = page(f"roseprof · {run.id}", run.manifest.get("name", run.id), run.id, main, figs, footer, script)
    return write_page(text, out_path)


def _section_panel(panel: dict) -> str:
    """One section panel as HTML: its title, a table, its note."""
    head = [html.escape(str(c)) for c in panel["columns"]]
    rows = [[html.escape(str(c)) for c in r] for r in panel.get("rows") or []]
    note = f"<p>{html.escape(panel['note'])}</p>" if panel.get("note") else ""
    return f'<div class="panel"><h2>{html.escape(panel["title"])}</h2>{table(head, rows)}{note}</div>'
