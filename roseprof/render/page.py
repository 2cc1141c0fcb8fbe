"""The HTML page shell shared by run and diff dashboards: one HTML file each, offline, with plotly.js written once
beside them (`plotly-<version>.min.js`, 4-5 MB) rather than inside every page (which made each page 5 MB).

Nothing from a trace is ever inserted as markup: callers escape text with html.escape, figure JSON is
escaped here so that no `</script>` or `<!--` in a name can end the script element, and plotly labels are
escaped in figures.py. A small error hook shows any JavaScript error in a banner (and tests read it).
"""

from __future__ import annotations

import functools
import html
import json
import os
from pathlib import Path

RENDERER_VERSION = "6"  # 4: plotly.js beside the page, not inside it; 5: a live run's request waterfall; 6: its dots' words from numbers
TEMPLATE = "plotly_white"  # every figure's look
_MARK = f"roseprof: {TEMPLATE} goes here"
# the mark as plotly writes it in a figure's JSON
_MARK_JSON = '"template":' + json.dumps({"layout": {"meta": _MARK}}, separators=(",", ":"))

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
table.rules td{text-align:left;vertical-align:top}table.rules td:first-child{font-family:monospace;font-size:12px;min-width:260px;max-width:380px}
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


def script_json(obj) -> str:
    """JSON that is safe inside <script>: no '<', '>' or '&' survive as themselves."""
    text = obj if isinstance(obj, str) else json.dumps(obj)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def table(head: list[str], rows: list[list[str]], cls: str | None = None) -> str:
    """An HTML table: a header row, then a row per list of cells (each already HTML: the caller escapes text)."""
    th = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    attr = f' class="{cls}"' if cls else ""
    return f"<table{attr}><tr>{th}</tr>{body}</table>"


def figure_divs(count: int) -> str:
    return "".join(f'<div class="panel"><div id="fig{i}" class="fig"></div></div>' for i in range(count))


def page(
    title: str, heading: str, sub: str, main: str, figs: list, footer: str = "", script: str = ""
) -> str:
    """A whole page: `heading`/`sub`/`title` are plain text (escaped here); `main` and `footer` are markup the
    caller built (with its own text escaped); `figs` are plotly figures drawn into figure_divs(len(figs));
    `script`: the renderer's own JavaScript (no trace text in it), run once the figures are drawn."""
    specs = "[" + ",".join(_figure_json(f) for f in figs) + "]"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<meta name="roseprof-renderer" content="{RENDERER_VERSION}">
<style>{STYLE}</style><script>{ERROR_HOOK}</script>
<script src="{plotly_js_name()}"></script></head>
<body><header><h1>{html.escape(heading)}</h1><div class="sub">{html.escape(sub)}</div></header>
<div id="errors"></div>
<main>{main}</main>
{f"<footer>{footer}</footer>" if footer else ""}
<script id="figures" type="application/json">{script_json(specs)}</script>
<script>
(function () {{
  var specs = JSON.parse(document.getElementById('figures').textContent);
  specs.forEach(function (spec, i) {{
    Plotly.newPlot('fig' + i, spec.data, spec.layout, {{responsive: true, displaylogo: false}});
  }});
  document.body.setAttribute('data-figures', String(specs.length));
}})();
</script>{f"<script>{script}</script>" if script else ""}</body></html>
"""


@functools.cache
def template_mark():
    """What every figure names as its template (figures.figure, figures.layout). plotly deep-copies a named
    template into each figure that names it and validates the copy (19 ms a figure, a dozen figures a run's page: a
    fifth of rendering it); this small template costs nothing, and `page` writes TEMPLATE's JSON, made once, in its
    place: the same figure as naming TEMPLATE in each made (tests/roseprof/test_page_template.py)."""
    import plotly.graph_objects as go  # here, not at the top: `open` of a current page needs no plotly

    return go.layout.Template(layout={"meta": _MARK})


@functools.cache
def _template_json() -> str:
    """TEMPLATE's JSON, from plotly's own registered copy (validated when plotly loaded it). Its keys are in the
    order of plotly's template file, not of a figure's validated copy: a figure made to write them in that order
    cost a deep copy of the template and its validation (docs/BENCHMARKS.md, session 31, issue 43)."""
    import plotly.io as pio
    from plotly.io.json import to_json_plotly

    return to_json_plotly(pio.templates[TEMPLATE].to_plotly_json())


def _figure_json(fig) -> str:
    """A figure's JSON, TEMPLATE in place of template_mark() (a figure that names no template: as plotly writes it)."""
    import plotly.io as pio

    text = pio.to_json(fig, validate=False)
    # Another plotly may write the mark otherwise: then the figure names the template itself, as before.
    if _MARK_JSON not in text:
        if fig.layout.template == template_mark():
            fig.update_layout(template=TEMPLATE)
        return pio.to_json(fig, validate=False)
    return text.replace(_MARK_JSON, '"template":' + _template_json(), 1)


def is_current(path: Path, since: float) -> bool:
    """Whether the page at `path` is there, was written after `since` (the run's newest change, as a file time)
    and by this renderer's version: else it is rendered again. Reads the page's head only (a run's page is
    megabytes), and imports no plotly: `roseprof open` of a current page renders nothing."""
    if not path.is_file() or path.stat().st_mtime < since:
        return False
    with path.open("rb") as f:  # 600 characters are at most 2,400 bytes
        head = f.read(2400).decode("utf-8", errors="replace")[:600]
    return f'content="{RENDERER_VERSION}"' in head


def plotly_js_name() -> str:
    """The file the pages load plotly.js from, beside them; versioned, so pages of an older plotly keep theirs."""
    from plotly.offline import get_plotlyjs_version

    return f"plotly-{get_plotlyjs_version()}.min.js"


def write_page(text: str, out_path: Path) -> Path:
    """Write atomically: a reader never sees half a page; plotly.js beside it once (the page loads it offline)."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    js = out_path.parent / plotly_js_name()
    if not js.is_file():
        from plotly.offline import get_plotlyjs

        _write_atomic(get_plotlyjs(), js)
    return _write_atomic(text, out_path)


def _write_atomic(text: str, out_path: Path) -> Path:
    tmp = out_path.with_name(out_path.name + f".{os.getpid()}.part")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, out_path)
    return out_path
