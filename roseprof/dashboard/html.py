"""One self-contained HTML file per run: summary cards, plotly figures, tables. Works offline (plotly.js inline).

Nothing from a trace is ever inserted as markup: tables and cards go through html.escape, figure JSON is
escaped so that no `</script>` or `<!--` in a name can end the script element, and plotly labels are escaped
in figures.py. A small error hook shows any JavaScript error in a banner (and tests read it).
"""

from __future__ import annotations

import datetime as dt
import html
import json
import os
from pathlib import Path

import plotly.io as pio
from plotly.offline import get_plotlyjs

from roseprof import units
from roseprof.dashboard import figures
from roseprof.store import Run, read_json

RENDERER_VERSION = "1"

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{padding:16px 24px;background:#1d2330;color:#fff}header h1{margin:0;font-size:20px}
header .sub{opacity:.75;font-size:13px;margin-top:4px;word-break:break-all}
main{padding:16px 24px;max-width:1400px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin-bottom:16px}
.card{background:#fff;border-radius:8px;padding:10px 14px;box-shadow:0 1px 2px #0002;min-width:150px}
.card .k{font-size:12px;color:#667}.card .v{font-size:18px;font-weight:600;margin-top:2px;word-break:break-all}
.panel{background:#fff;border-radius:8px;padding:8px;margin-bottom:16px;box-shadow:0 1px 2px #0002}
table{border-collapse:collapse;font-size:13px;width:100%}th,td{padding:4px 8px;border-bottom:1px solid #eee;text-align:right}
th:first-child,td:first-child{text-align:left;word-break:break-all}
table.kernels td:first-child{min-width:260px}table.kernels td:nth-child(2){text-align:left;font-family:monospace;font-size:12px;word-break:break-all}
h2{font-size:16px;margin:8px}#errors{display:none;background:#fdd;color:#900;padding:8px 24px}
footer{font-size:12px;color:#667;padding:8px 24px 24px}
"""

ERROR_HOOK = """
window.__dashboardErrors = [];
window.addEventListener('error', function (e) {
  window.__dashboardErrors.push(String(e.message));
  var box = document.getElementById('errors');
  if (box) { box.style.display = 'block'; box.textContent = 'Dashboard error: ' + window.__dashboardErrors.join(' | '); }
});
"""


def _script_json(obj) -> str:
    """JSON that is safe inside <script>: no '<', '>' or '&' survive as themselves."""
    text = obj if isinstance(obj, str) else json.dumps(obj)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _cards(run: Run, summary: dict) -> list[tuple[str, str]]:
    m = run.manifest
    tool = m.get("tool", {})
    env = m.get("environment") or {}
    gpus = m.get("gpus") or summary.get("gpus") or []
    device = ", ".join(g.get("name", "?") for g in gpus) or (env.get("cpu") or {}).get("model", "CPU")
    cards = [
        ("tool", f"{tool.get('name', '?')} {tool.get('version', '')}"),
        ("status", m.get("status", "?")),
        ("device", device),
        ("command", " ".join(m.get("command") or []) or m.get("source", "-")),
    ]
    steps = summary.get("steps")
    if steps:
        cards.append(("decode steps", f"{steps['count']:,} (rollover {steps['rollover']['count']:,})"))
        cards.append(("step p50 / p99", f"{units.us(steps['p50_ns'])} / {units.us(steps['p99_ns'])} µs"))
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
    return cards


def _region_table(summary: dict) -> str:
    regions = summary.get("regions") or []
    if not regions:
        return ""
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "region",
            "count",
            "total ms",
            "self ms",
            "p50 µs",
            "p99 µs",
            "GPU proj ms",
            "GPU kernel ms",
        )
    )
    body = []
    for r in regions:
        name = f"{r['domain']}:{r['name']}" if r.get("domain") else r["name"]
        cells = [
            html.escape(name),
            f"{r['count']:,}",
            units.ms(r["total_ns"]),
            units.ms(r["self_ns"]),
            units.us(r["p50_ns"]),
            units.us(r["p99_ns"]),
            units.ms(r["gpu_proj_ns"]),
            units.ms(r["gpu_kernel_ns"]),
        ]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f'<div class="panel"><h2>Regions</h2><table><tr>{head}</tr>{"".join(body)}</table></div>'


def _kernels_by_region(summary: dict, per_region: int = 5) -> str:
    kernels = summary.get("kernels") or []
    if not kernels:
        return ""
    groups: dict[str, list[dict]] = {}
    for k in kernels:
        groups.setdefault(k["region"] or "(outside any range)", []).append(k)
    rows = []
    for region, ks in sorted(groups.items(), key=lambda kv: -sum(k["total_ns"] for k in kv[1])):
        for k in sorted(ks, key=lambda k: -k["total_ns"])[:per_region]:
            mean = k["total_ns"] / k["count"] if k["count"] else 0
            cells = [
                html.escape(region),
                html.escape(k["name"]),
                f"{k['count']:,}",
                units.ms(k["total_ns"]),
                units.us(mean),
            ]
            rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("region (innermost)", "kernel", "count", "total ms", "mean µs"))
    return (
        f'<div class="panel"><h2>Top kernels per region (top {per_region} each)</h2>'
        f'<table class="kernels"><tr>{head}</tr>{"".join(rows)}</table></div>'
    )


def build_figures(run: Run, summary: dict) -> list:
    steps = run.table("steps")
    itl = run.table("itl")
    out = [
        figures.region_bars(summary),
        figures.step_breakdown(steps),
        figures.itl_over_time(itl),
        figures.itl_distribution(itl),
        figures.step_distribution(summary, steps),
        figures.top_kernels(summary),
        figures.gpu_idle(steps),
        figures.telemetry(run.table("telemetry")),
    ]
    return [f for f in out if f is not None]


def render_run(run: Run, out_path: Path) -> Path:
    """Write the run's dashboard to out_path (atomically) and return it."""
    summary = run.summary()
    figs = build_figures(run, summary)
    cards = "".join(
        f'<div class="card"><div class="k">{html.escape(k)}</div><div class="v">{html.escape(str(v))}</div></div>'
        for k, v in _cards(run, summary)
    )
    divs = "".join(f'<div class="panel"><div id="fig{i}" class="fig"></div></div>' for i in range(len(figs)))
    specs = "[" + ",".join(pio.to_json(f, validate=False) for f in figs) + "]"
    warnings = "".join(f"<li>{html.escape(w)}</li>" for w in summary.get("warnings") or [])
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>roseprof · {html.escape(run.id)}</title>
<meta name="roseprof-renderer" content="{RENDERER_VERSION}">
<style>{STYLE}</style><script>{ERROR_HOOK}</script>
<script>{get_plotlyjs()}</script></head>
<body><header><h1>{html.escape(run.manifest.get("name", run.id))}</h1><div class="sub">{html.escape(run.id)}</div></header>
<div id="errors"></div>
<main><div class="cards">{cards}</div>
{f'<div class="panel"><h2>Warnings</h2><ul>{warnings}</ul></div>' if warnings else ""}
{divs}
{_region_table(summary)}
{_kernels_by_region(summary)}
</main>
<footer>Rendered {dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")} by roseprof from the stored run alone.
Percentiles are over all instances; large runs are binned or thinned in the figures as each figure's subtitle says,
never in the tables.</footer>
<script id="figures" type="application/json">{_script_json(specs)}</script>
<script>
(function () {{
  var specs = JSON.parse(document.getElementById('figures').textContent);
  specs.forEach(function (spec, i) {{
    Plotly.newPlot('fig' + i, spec.data, spec.layout, {{responsive: true, displaylogo: false}});
  }});
  document.body.setAttribute('data-figures', String(specs.length));
}})();
</script></body></html>
"""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + ".part")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, out_path)
    return out_path


def dashboard_path(run: Run, dashboards_dir: str | os.PathLike) -> Path:
    return Path(dashboards_dir) / f"{run.id}.html"


def is_stale(run: Run, path: Path) -> bool:
    if not path.is_file():
        return True
    newest = max((p.stat().st_mtime for p in run.path.iterdir() if p.suffix == ".json"), default=0)
    if path.stat().st_mtime < newest:
        return True
    head = path.read_text(encoding="utf-8", errors="replace")[:600]
    return f'content="{RENDERER_VERSION}"' not in head


def ensure_dashboard(run: Run, dashboards_dir) -> Path:
    path = dashboard_path(run, dashboards_dir)
    if is_stale(run, path):
        render_run(run, path)
    return path


__all__ = ["render_run", "ensure_dashboard", "dashboard_path", "is_stale", "read_json"]
