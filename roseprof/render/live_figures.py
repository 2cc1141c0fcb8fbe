"""A `roseprof live` run's dashboard figure: the request waterfall (client view: one bar per request, queued /
prefill / decode, a dot per token) above the step timeline (server view: each decode step's wall time as a bar
where it ran, its batch size, prefills and rollovers in its hover), on one time axis. A click on a request marks
its steps in the timeline (LINK_JS, added to the page; the figure says so in its `meta`).

One time axis from two clocks: the client stamps tokens on its own clock (ms since the load began), the server its
steps on its monotonic clock. For a server on this host they are one clock (live/path.py says so: the `path` part,
and the load's monotonic start), and the client's times are placed exactly. Otherwise every joined token arrives
after the step that emitted it ended, so the client clock is shifted by the smallest (token arrival - its step's
end) over the joined tokens: the fastest token is drawn as arriving the moment its step ended, every other one at
most its own HTTP path's extra cost later (the figure's note says which).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from roseprof.render.figures import figure, layout

WATERFALL_MAX = 400  # requests drawn
COLORS = {"queued": "#c7c7c7", "prefill": "#ff9f43", "decode": "#4c78a8", "waiting": "#e0c2a0"}
STEP, ROLLOVER, PREFILL_STEP, PICKED = "#7f9fbf", "#d62728", "#ff9f43", "#111111"


def _clock_shift(log, tokens: list[dict], first: int, t0: int) -> tuple[float, list[float]] | None:
    """(ms to subtract from a client time to put it on the server's axis, ms from `t0`; each joined token's
    delivery beyond the fastest one: ms); None when no token joined a step."""
    gaps = []
    for row in tokens:
        for t, step in zip(row["t_ms"], row["steps"]):
            pos = step - first if isinstance(step, int) and step >= 0 else -1
            if 0 <= pos < len(log.steps):
                gaps.append(t - (log.steps[pos]["end_ns"] - t0) / 1e6)
    if not gaps:
        return None
    shift = min(gaps)
    return shift, [g - shift for g in gaps]


def waterfall(
    log, tokens: list[dict] | None, live: dict, start_monotonic_ns: int | None = None
) -> go.Figure | None:
    """`start_monotonic_ns`: the load's start on the monotonic clock (serving's `clock`), used where the live run
    found the server on this host's clock."""
    if log is None or not log.steps or not tokens:
        return None
    first = int(live["window"]["first_step"])
    t0 = min([log.steps[0]["start_ns"]] + [p["start_ns"] for p in log.prefills])
    clock = _clock_shift(log, tokens, first, t0)
    if clock is None:
        return None
    shift, extra = clock
    one_clock = bool((live.get("path") or {}).get("clocks_agree")) and start_monotonic_ns is not None
    if one_clock:
        shift = (t0 - start_monotonic_ns) / 1e6
    ms = lambda ns: (ns - t0) / 1e6  # noqa: E731 - server ns -> the axis' ms
    by_id = {r.get("request_id"): r for r in log.requests}
    prefill_of = {}
    for p in log.prefills:
        for seq in p.get("requests", []):
            prefill_of.setdefault(seq, p)  # its first prefill (a readmission's comes later)
    shown = sorted(tokens, key=lambda r: r["index"])[:WATERFALL_MAX]
    fig = make_subplots(
        figure=figure(), rows=2, cols=1, shared_xaxes=True, row_heights=[0.62, 0.38], vertical_spacing=0.05
    )
    bars: dict[str, tuple[list, list, list, list, list]] = {k: ([], [], [], [], []) for k in COLORS}
    dots_x, dots_y, dots_data = [], [], []
    for row in shown:
        if row.get("sent_ms") is None or not row["t_ms"]:
            continue
        rid, y = row["request_id"], row["index"]
        sent, times = row["sent_ms"] - shift, [t - shift for t in row["t_ms"]]
        steps = [s - first for s in row["steps"] if isinstance(s, int) and 0 <= s - first < len(log.steps)]
        record = by_id.get(rid)
        p = prefill_of.get(record["id"]) if record is not None else None
        if p is not None:
            start, end = max(sent, ms(p["start_ns"])), max(sent, ms(p["end_ns"]))
            parts = [("queued", sent, start), ("prefill", start, end), ("decode", end, times[-1])]
        else:  # its prefill is older than the window: the client's wait for the first token, then decode
            parts = [("waiting", sent, times[0]), ("decode", times[0], times[-1])]
        for kind, a, b in parts:
            x, base, ys, data, text = bars[kind]
            x.append(max(b - a, 0.0))
            base.append(a)
            ys.append(y)
            data.append([rid, steps])
            text.append(f"request {y}: {rid}<br>{kind} {max(b - a, 0.0):.2f} ms<br>{len(row['t_ms'])} tokens, "
                        f"{len(steps)} in the window's steps (click: mark them)")  # fmt: skip
        for i, t in enumerate(times):
            dots_x.append(round(t, 3))  # µs on a ms axis: a page of 16,384 dots is not 18 digits each
            dots_y.append(y)
            step = row["steps"][i]
            dots_data.append([i, "-" if step is None else step])  # (a token no step is known for: `step -`)
    for kind, (x, base, ys, data, text) in bars.items():
        if x:
            fig.add_trace(go.Bar(x=x, base=base, y=ys, orientation="h", name=kind, marker_color=COLORS[kind],
                                 customdata=data, hovertext=text, hoverinfo="text"), row=1, col=1)  # fmt: skip
    # A dot's words from its numbers (request row, token, step): a line of text each was most of the page's bytes.
    fig.add_trace(go.Scatter(x=dots_x, y=dots_y, mode="markers", name="tokens (client)", customdata=dots_data,
                             hovertemplate="request %{y}, token %{customdata[0]}: step %{customdata[1]}<extra></extra>",
                             marker={"size": 3, "color": "#222"}), row=1, col=1)  # fmt: skip
    _step_timeline(fig, log, first, ms)
    fig.update_yaxes(title="request", autorange="reversed", row=1, col=1)
    fig.update_yaxes(title="step ms", row=2, col=1)
    fig.update_xaxes(title="ms (server clock, from the window's first step or prefill)", row=2, col=1)
    fig.update_layout(barmode="overlay", meta={"link": "request-steps"}, bargap=0.15)
    thinned = (
        f"the first {WATERFALL_MAX} of {len(tokens):,} requests; " if len(tokens) > WATERFALL_MAX else ""
    )
    if one_clock:
        how = "client and server on one clock (a server on this host)"
    else:
        how = (
            f"client times shifted by {shift:.2f} ms (the fastest token drawn at its step's end; the others arrive "
            f"a median {float(np.median(extra)):.2f} ms after that)"
        )
    note = f"{thinned}{how}; click a request to mark its steps"
    return layout(
        fig, "Requests (client) above the server's decode steps, on one time axis", note, height=760
    )


def _step_timeline(fig: go.Figure, log, first: int, ms) -> None:
    """Each decode step as a bar over the time it ran (height: its wall time), each prefill likewise."""
    x, width, height, colors, text, pos = [], [], [], [], [], []
    for i, s in enumerate(log.steps):
        a, b = ms(s["start_ns"]), ms(s["end_ns"])
        x.append((a + b) / 2)
        width.append(max(b - a, 1e-3))
        height.append(b - a)
        colors.append(ROLLOVER if s["rollovers"] else STEP)
        pos.append(i)
        text.append(f"step {first + i}: {b - a:.2f} ms, batch {s['batch_size']}, rollovers {s['rollovers']}")
    fig.add_trace(go.Bar(x=x, width=width, y=height, name="decode step (red: a KV block rollover)",
                         marker_color=colors, customdata=pos, hovertext=text, hoverinfo="text",
                         meta={"role": "steps", "colors": colors}), row=2, col=1)  # fmt: skip
    px, pw, ph, pt = [], [], [], []
    for p in log.prefills:
        a, b = ms(p["start_ns"]), ms(p["end_ns"])
        px.append((a + b) / 2)
        pw.append(max(b - a, 1e-3))
        ph.append(b - a)
        pt.append(
            f"prefill: {p.get('tokens', 0)} tokens, {p.get('batch_size', 1)} request(s), {b - a:.2f} ms"
        )
    if px:
        fig.add_trace(go.Bar(x=px, width=pw, y=ph, name="prefill", marker_color=PREFILL_STEP, hovertext=pt,
                             hoverinfo="text"), row=2, col=1)  # fmt: skip


# The page's script for figures whose layout.meta.link is "request-steps": a click on a request's bar marks the
# decode steps its tokens came from (their customdata positions) in the step timeline, and a click elsewhere clears.
_LINK_JS = """
(function () {
  document.querySelectorAll('.fig').forEach(function (gd) {
    if (!gd.layout || !gd.layout.meta || gd.layout.meta.link !== 'request-steps' || !gd.on) return;
    gd.on('plotly_click', function (ev) {
      var cd = ev.points && ev.points[0] ? ev.points[0].customdata : null;
      var want = {};
      if (cd && Array.isArray(cd[1])) cd[1].forEach(function (k) { want[k] = true; });
      gd.data.forEach(function (tr, i) {
        if (!tr.meta || tr.meta.role !== 'steps') return;
        var colors = tr.customdata.map(function (pos, j) { return want[pos] ? '%s' : tr.meta.colors[j]; });
        Plotly.restyle(gd, {'marker.color': [colors]}, [i]);
      });
      gd.setAttribute('data-picked', cd && Array.isArray(cd[1]) ? String(cd[0]) : '');
    });
  });
})();
"""
LINK_JS = _LINK_JS % PICKED
